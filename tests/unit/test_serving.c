/* test_serving.c - the scan for running SGLang/vLLM servers over /proc-like fixture trees
 * (tests/fixtures/proc/), and the interpreter pick with fake interpreters
 * (tests/tools/fake_probe.sh standing in for python). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mt.h"
#include "serving.h"

#define FIX MT_SOURCE_DIR "/tests/fixtures/proc"
#define FAKE_PROBE MT_SOURCE_DIR "/tests/tools/fake_probe.sh"

static const srv_server_t *find_pid(const srv_server_t *s, size_t n, int pid) {
    for (size_t i = 0; i < n; i++)
        if (s[i].pid == pid) return &s[i];
    return NULL;
}

/* Every way of launching a server in the fixture is found, with the interpreter it was
 * started as (not the exe link's system python); look-alikes are not. */
static void test_scan_all(void **state) {
    srv_server_t s[SRV_MAX_SERVERS];
    size_t n = 0;
    char err[300] = "";
    assert_int_equal(srv_scan(FIX "/serving", NULL, s, SRV_MAX_SERVERS, &n, err, sizeof err), MT_OK);
    static const struct {
        int pid;
        const char *engine, *python, *from;
    } want[] = {
        {4242, "sglang", "/root/ml-env/bin/python3", "argv[0]"},
        {4250, "sglang", "/root/ml-env/bin/python3", "argv[0]"},
        {5000, "vllm", "/opt/vllm-env/bin/python", "argv[0]"}, /* vllm serve: a script run by python */
        {5100, "vllm", "/srv/app/venv/bin/python3", "cwd"},    /* ./venv/bin/python3 -u -X ... -m */
        {5200, "sglang", "/usr/bin/python3.12", "exe"},        /* bare python3, not on its PATH */
        {5300, "sglang", "", "unknown"},                       /* another user's: only cmdline is readable */
        {6005, "vllm", "/usr/bin/python3", "argv[0]"},         /* -m vllm.entrypoints.cli.main serve */
    };
    size_t nw = sizeof want / sizeof want[0];
    if (n != nw) {
        for (size_t i = 0; i < n; i++) fprintf(stderr, "found pid %d: %s\n", s[i].pid, s[i].command);
        fail_msg("%zu servers found, expected %zu", n, nw);
    }
    for (size_t i = 0; i < nw; i++) {
        assert_int_equal(s[i].pid, want[i].pid); /* ascending pid order */
        assert_string_equal(s[i].engine, want[i].engine);
        assert_string_equal(s[i].python, want[i].python);
        assert_string_equal(s[i].python_from, want[i].from);
    }
    const srv_server_t *a = find_pid(s, n, 4242);
    assert_string_equal(a->exe, "/usr/bin/python3.12");
    assert_string_equal(a->command, "/root/ml-env/bin/python3 -m sglang.launch_server --model-path "
                                    "Qwen/Qwen3.5-122B-A10B --tp 4 --port 30000");
    /* grep, bash -c, python -c, -m sglang.bench_serving, vllm bench serve: not servers */
    for (int pid = 6000; pid <= 6004; pid++) assert_null(find_pid(s, n, pid));
}

static void test_scan_engine(void **state) {
    srv_server_t s[SRV_MAX_SERVERS];
    size_t n = 0;
    char err[300] = "";
    assert_int_equal(srv_scan(FIX "/serving", "sglang", s, SRV_MAX_SERVERS, &n, err, sizeof err), MT_OK);
    assert_int_equal(n, 4);
    assert_int_equal(s[0].pid, 4242);
    assert_int_equal(s[2].pid, 5200);
    assert_int_equal(s[3].pid, 5300);
    assert_int_equal(srv_scan(FIX "/serving", "vllm", s, SRV_MAX_SERVERS, &n, err, sizeof err), MT_OK);
    assert_int_equal(n, 3);
    assert_int_equal(s[0].pid, 5000);
    /* max cuts the list, lowest pids kept */
    assert_int_equal(srv_scan(FIX "/serving", NULL, s, 2, &n, err, sizeof err), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(s[1].pid, 4250);
}

static void test_scan_none(void **state) {
    srv_server_t s[4];
    size_t n = 99;
    char err[300] = "";
    assert_int_equal(srv_scan(FIX "/none", NULL, s, 4, &n, err, sizeof err), MT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(srv_scan(FIX "/empty", NULL, s, 4, &n, err, sizeof err), MT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(srv_scan(FIX "/no-such-root", NULL, s, 4, &n, err, sizeof err), MT_IO);
    assert_non_null(strstr(err, "no-such-root"));
}

/* A temporary /proc-like tree: one process PID with the given argv (exe -> EXE). */
static void make_proc(const char *root, int pid, const char *exe, const char *environ_text, const char *const *argv) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%d", root, pid);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/cmdline", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; argv[i]; i++) fwrite(argv[i], 1, strlen(argv[i]) + 1, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/exe", dir);
    assert_int_equal(symlink(exe, path), 0);
    if (environ_text) {
        snprintf(path, sizeof path, "%s/environ", dir);
        f = fopen(path, "wb");
        assert_non_null(f);
        fwrite(environ_text, 1, strlen(environ_text) + 1, f);
        fclose(f);
    }
}

static void write_exec(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

/* A bare "python3" is looked up in the process's own PATH: the first folder holding it. */
static void test_scan_path(void **state) {
    char root[] = "/tmp/mt-serving-XXXXXX", bin[128], py[160], env[400], cmd[600];
    assert_non_null(mkdtemp(root));
    snprintf(bin, sizeof bin, "%s/venv-bin", root);
    assert_int_equal(mkdir(bin, 0755), 0);
    snprintf(py, sizeof py, "%s/python3", bin);
    write_exec(py, "#!/bin/sh\n");
    snprintf(env, sizeof env, "PATH=/nonexistent-moetune:%s:/usr/bin", bin);
    const char *argv[] = {"python3", "-m", "sglang.launch_server", NULL};
    make_proc(root, 77, "/usr/bin/python3.12", env, argv);
    srv_server_t s[2];
    size_t n = 0;
    char err[300];
    assert_int_equal(srv_scan(root, "sglang", s, 2, &n, err, sizeof err), MT_OK);
    assert_int_equal(n, 1);
    assert_string_equal(s[0].python, py);
    assert_string_equal(s[0].python_from, "PATH");
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* A running server's interpreter is the pick, probed once, and the description names
 * the process. */
static void test_pick_server(void **state) {
    char root[] = "/tmp/mt-serving-XXXXXX", cmd[600], line[2048];
    assert_non_null(mkdtemp(root));
    const char *argv[] = {FAKE_PROBE, "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.5-35B-A3B", NULL};
    make_proc(root, 31337, "/usr/bin/python3.12", NULL, argv);
    const char *vargv[] = {"/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", NULL};
    make_proc(root, 100, "/usr/bin/python3.12", NULL, vargv);
    const char *other[] = {"/opt/other/bin/python3", "-m", "sglang.launch_server", NULL};
    make_proc(root, 40000, "/usr/bin/python3.12", NULL, other);
    srv_pick_t *p = NULL;
    char err[300];
    assert_int_equal(srv_pick_new(65536, &p), MT_OK);
    srv_pick_opts_t o = {.proc_root = root, .engine = "sglang", .helper = "/nonexistent/helper.py"};
    assert_int_equal(srv_pick(&o, p, err, sizeof err), MT_OK);
    assert_true(p->from_server);
    assert_int_equal(p->server.pid, 31337); /* the vLLM server (pid 100) is not SGLang's */
    assert_string_equal(p->python, FAKE_PROBE);
    assert_true(p->probed);
    assert_int_equal(p->status, 0);
    assert_string_equal(p->probe.torch, "2.11.0");
    assert_string_equal(p->probe.engine_version, "0.5.4");
    assert_int_equal(p->n_tried, 0);
    srv_pick_describe(p, "sglang", line, sizeof line);
    assert_string_equal(line, "SGLang server pid 31337 (" FAKE_PROBE " -m sglang.launch_server --model-path "
                              "Qwen/Qwen3.5-35B-A3B): its interpreter " FAKE_PROBE
                              " (2 such processes, not all with this interpreter: give --python to choose)");
    assert_int_equal(p->n_servers, 2);
    assert_true(p->servers_differ);
    /* a server whose interpreter cannot be read: named, and the candidates are probed */
    snprintf(cmd, sizeof cmd, "rm -rf %s/31337 %s/40000", root, root);
    assert_int_equal(system(cmd), 0);
    char hidden[600];
    snprintf(hidden, sizeof hidden, "%s/500", root);
    assert_int_equal(mkdir(hidden, 0755), 0);
    snprintf(hidden, sizeof hidden, "%s/500/cmdline", root);
    FILE *f = fopen(hidden, "wb");
    assert_non_null(f);
    fwrite("python\0-m\0sglang.launch_server\0", 1, 31, f);
    fclose(f);
    const char *const only[] = {FAKE_PROBE, NULL};
    o.candidates = only;
    assert_int_equal(srv_pick(&o, p, err, sizeof err), MT_OK);
    assert_false(p->from_server);
    assert_int_equal(p->n_servers, 1);
    assert_string_equal(p->python, FAKE_PROBE);
    srv_pick_describe(p, "sglang", line, sizeof line);
    assert_string_equal(line, "SGLang server pid 500 (python -m sglang.launch_server) runs an interpreter moetune "
                              "cannot read (run as its user or root, or give --python); interpreters tried: " FAKE_PROBE
                              " (torch 2.11.0, Triton 3.6.0, sglang 0.5.4)");
    srv_pick_destroy(&p);
    assert_null(p);
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* No server: the candidates are probed in order and the best kept (the engine, else torch
 * and Triton, else one that answered); each is listed with what it has or lacks. */
static void test_pick_candidates(void **state) {
    char dir[] = "/tmp/mt-serving-XXXXXX", no_torch[128], no_engine[128], text[512], cmd[600], line[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(no_torch, sizeof no_torch, "%s/python-no-torch", dir);
    snprintf(text, sizeof text, "#!/bin/sh\nFAKE_PROBE=no_torch exec %s \"$@\"\n", FAKE_PROBE);
    write_exec(no_torch, text);
    snprintf(no_engine, sizeof no_engine, "%s/python-no-engine", dir);
    snprintf(text, sizeof text, "#!/bin/sh\nFAKE_PROBE=no_engine exec %s \"$@\"\n", FAKE_PROBE);
    write_exec(no_engine, text);
    srv_pick_t *p = NULL;
    char err[300];
    assert_int_equal(srv_pick_new(65536, &p), MT_OK);

    const char *const all[] = {"/nonexistent/python3", no_torch, no_engine, FAKE_PROBE, "never-tried", NULL};
    srv_pick_opts_t o = {.proc_root = FIX "/none", .engine = "sglang", .helper = "h.py", .candidates = all};
    assert_int_equal(srv_pick(&o, p, err, sizeof err), MT_OK);
    assert_false(p->from_server);
    assert_int_equal(p->n_tried, 4); /* the engine found at the fourth: no fifth probe */
    assert_string_equal(p->python, FAKE_PROBE);
    assert_string_equal(p->probe.engine_version, "0.5.4");
    srv_pick_describe(p, "sglang", line, sizeof line);
    assert_non_null(strstr(line, "no running SGLang server found; interpreters tried: /nonexistent/python3 (did "
                                 "not answer: cannot run /nonexistent/python3: No such file or directory)"));
    assert_non_null(strstr(line, "python-no-torch (" FAKE_PROBE ": no torch)"));
    assert_non_null(strstr(line, "python-no-engine (" FAKE_PROBE ": torch 2.11.0, Triton 3.6.0, no sglang)"));
    assert_non_null(strstr(line, FAKE_PROBE " (torch 2.11.0, Triton 3.6.0, sglang 0.5.4)"));
    assert_null(strchr(line, '\n'));

    /* none has the engine: torch and Triton win over an interpreter without them, and the
     * winner's probe is what the pick holds even when another was probed after it */
    const char *const some[] = {no_engine, no_torch, NULL};
    o.candidates = some;
    assert_int_equal(srv_pick(&o, p, err, sizeof err), MT_OK);
    assert_int_equal(p->n_tried, 2);
    assert_string_equal(p->python, no_engine);
    assert_string_equal(p->probe.triton, "3.6.0");
    assert_string_equal(p->probe.engine_version, "");
    srv_pick_destroy(&p);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Writes DIR/NAME: a fake interpreter running fake_probe.sh with BODY's settings first. */
static void fake_python(char *path, size_t len, const char *dir, const char *name, const char *body) {
    char text[1024];
    snprintf(path, len, "%s/%s", dir, name);
    snprintf(text, sizeof text, "#!/bin/sh\n%s\nexec %s \"$@\"\n", body, FAKE_PROBE);
    write_exec(path, text);
}

/* tune's rule without --backend: the engine's kernel where torch, Triton and the engine
 * import; moetune's Triton kernel where only torch and Triton do (files still for the
 * engine); cuda without them; the installed engine when none is named or running. */
static void test_decide(void **state) {
    char dir[] = "/tmp/mt-serving-XXXXXX", ok[128], no_engine[128], no_torch[128], vllm_only[128], cmd[600];
    char root[160], err[600] = "";
    assert_non_null(mkdtemp(dir));
    fake_python(ok, sizeof ok, dir, "python-ok", "");
    fake_python(no_engine, sizeof no_engine, dir, "python-no-engine", "export FAKE_PROBE=no_engine");
    fake_python(no_torch, sizeof no_torch, dir, "python-no-torch", "export FAKE_PROBE=no_torch");
    fake_python(vllm_only, sizeof vllm_only, dir, "python-vllm",
                "case \"$*\" in *\"--engine sglang\"*) export FAKE_PROBE=no_engine;; esac");
    srv_decision_t d;
    const char *c_ok[] = {ok, NULL}, *c_no_engine[] = {no_engine, NULL}, *c_no_torch[] = {no_torch, NULL},
               *c_vllm[] = {vllm_only, NULL};
    srv_decide_opts_t o = {.proc_root = FIX "/none", .helper = "h.py", .candidates = c_ok};

    assert_int_equal(srv_decide(&o, &d, err, sizeof err), MT_OK);
    assert_string_equal(d.backend, "triton");
    assert_string_equal(d.kernel, "sglang");
    assert_string_equal(d.engine, "sglang");
    assert_string_equal(d.python, ok);
    assert_non_null(strstr(d.why, "backend triton, kernel sglang, files for SGLang: no running SGLang server found"));

    o.candidates = c_no_engine;
    assert_int_equal(srv_decide(&o, &d, err, sizeof err), MT_OK);
    assert_string_equal(d.backend, "triton");
    assert_string_equal(d.kernel, "moetune");
    assert_string_equal(d.engine, "sglang");
    assert_non_null(strstr(d.why, "moetune's own Triton kernel (sglang is not installed in"));

    o.candidates = c_no_torch;
    assert_int_equal(srv_decide(&o, &d, err, sizeof err), MT_OK);
    assert_string_equal(d.backend, "cuda");
    assert_string_equal(d.python, "");
    assert_non_null(strstr(d.why, "backend cuda: no torch in"));
    assert_non_null(strstr(d.why, "no engine reads"));

    /* only vLLM installed, nothing named or running: vLLM's kernel and files */
    o.candidates = c_vllm;
    assert_int_equal(srv_decide(&o, &d, err, sizeof err), MT_OK);
    assert_string_equal(d.kernel, "vllm");
    assert_string_equal(d.engine, "vllm");
    assert_string_equal(d.python, vllm_only);
    assert_non_null(strstr(d.why, "vllm 0.5.4 is installed there"));

    /* --python names the interpreter: no scan, no other candidate */
    o.python = no_torch;
    o.candidates = c_ok;
    assert_int_equal(srv_decide(&o, &d, err, sizeof err), MT_OK);
    assert_string_equal(d.backend, "cuda");
    assert_non_null(strstr(d.why, "--python "));
    o.python = NULL;

    /* a running vLLM server decides the engine and the interpreter */
    snprintf(root, sizeof root, "%s/proc", dir);
    assert_int_equal(mkdir(root, 0755), 0);
    const char *argv[] = {ok, ok, "serve", "Qwen/Qwen3.5-35B-A3B", NULL};
    argv[1] = "/opt/venv/bin/vllm";
    make_proc(root, 900, "/usr/bin/python3.12", NULL, argv);
    o.proc_root = root;
    o.candidates = c_no_torch;
    assert_int_equal(srv_decide(&o, &d, err, sizeof err), MT_OK);
    assert_string_equal(d.backend, "triton");
    assert_string_equal(d.kernel, "vllm");
    assert_string_equal(d.engine, "vllm");
    assert_string_equal(d.python, ok);
    assert_non_null(strstr(d.why, "vLLM server pid 900"));

    /* --backend triton --kernel sglang where no interpreter has SGLang: refused in one line */
    o.proc_root = FIX "/none";
    o.candidates = c_no_engine;
    o.kernel = "sglang";
    o.triton_given = true;
    assert_int_equal(srv_decide(&o, &d, err, sizeof err), MT_NOTFOUND);
    assert_non_null(strstr(err, "--kernel sglang: sglang is not importable in"));
    assert_null(strchr(err, '\n'));
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    unsetenv("FAKE_PROBE");
    unsetenv("FAKE_ENV_DIR");
    unsetenv("FAKE_CONFIG_DIR");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_all),  cmocka_unit_test(test_scan_engine), cmocka_unit_test(test_scan_none),
        cmocka_unit_test(test_scan_path), cmocka_unit_test(test_pick_server), cmocka_unit_test(test_pick_candidates),
        cmocka_unit_test(test_decide),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
