/* convert.c - wire messages <-> kernels/space.h structs. See convert.h. */
#include "convert.h"

#include <stdio.h>
#include <string.h>

#include "mt.h"

mt_status_t wire_shape_from_msg(const Moetune__Shape *m, krn_shape_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!m) {
        mt_fmt(err, errlen, "shape missing");
        return MT_INVAL;
    }
#define X(f) out->f = m->f;
    KRN_SHAPE_INTS(X)
#undef X
    const char *dt = m->dtype && *m->dtype ? m->dtype : "bf16";
    if (strlen(dt) >= sizeof out->dtype) {
        mt_fmt(err, errlen, "dtype '%.32s' is not one of bf16, fp8_w8a8", dt);
        return MT_INVAL;
    }
    snprintf(out->dtype, sizeof out->dtype, "%s", dt);
    const char *rt = m->routing ? m->routing : "";
    if (strlen(rt) >= sizeof out->routing) {
        mt_fmt(err, errlen, "routing is not a sha256 (64 lowercase hex digits)");
        return MT_INVAL;
    }
    snprintf(out->routing, sizeof out->routing, "%s", rt);
    return krn_shape_check(out, err, errlen);
}

void wire_shape_to_msg(const krn_shape_t *sh, Moetune__Shape *m) {
    moetune__shape__init(m);
#define X(f) m->f = sh->f;
    KRN_SHAPE_INTS(X)
#undef X
    m->dtype = (char *)sh->dtype;
    m->routing = (char *)sh->routing;
}

void wire_config_from_msg(const Moetune__Config *m, krn_config_t *out) {
#define X(f, file, opt, max) out->f = m->f;
    KRN_CONFIG_FIELDS(X)
#undef X
}

void wire_config_to_msg(const krn_config_t *c, Moetune__Config *m) {
    moetune__config__init(m);
#define X(f, file, opt, max) m->f = c->f;
    KRN_CONFIG_FIELDS(X)
#undef X
}

void wire_measure_fill(const Moetune__Measure *m, Moetune__Measure *out) {
    Moetune__Measure given = MOETUNE__MEASURE__INIT;
    if (m) given = *m;
    *out = given;
#define X(f, def) out->f = given.f > 0 ? given.f : (def);
    WIRE_MEASURE_DEFAULTS(X)
#undef X
}
