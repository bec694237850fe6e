/* cmd_keys.c - the keygen subcommand: a CURVE key pair for a coordinator, worker or client. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "mt.h"
#include "secure.h"

int cmd_keygen(const cli_cmd_t *cmd, cli_opts_t *o) {
    char err[600], host[128], z85[SEC_Z85_LEN + 1];
    sec_cert_t cert;
    if (!o->out) return cli_usage(cmd, "--out DIR is required");
    const char *name = o->key_name;
    if (!name) {
        if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "moetune");
        host[sizeof host - 1] = '\0';
        name = host;
    }
    int rc = sec_keygen(o->out, name, &cert, err, sizeof err);
    if (rc == MT_INVAL) return cli_usage(cmd, err);
    if (rc != MT_OK) return cli_fail(cmd, err);
    sec_z85(cert.pub, z85);
    memset(&cert, 0, sizeof cert);
    printf("wrote %s/%s.key (secret, mode 0600) and %s/%s.pub (public key %s)\n", o->out, name, o->out, name, z85);
    return MT_EXIT_OK;
}
