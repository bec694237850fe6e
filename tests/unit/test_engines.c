/* test_engines.c - the engine table of kernels/engines.h: lookup by name and id, and engine lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engines.h"

static void test_find(void **state) {
    (void)state;
    const krn_engine_t *s = krn_engine_find("sglang"), *v = krn_engine_find("vllm");
    assert_non_null(s);
    assert_non_null(v);
    assert_int_equal(s->id, KRN_ENGINE_SGLANG);
    assert_int_equal(v->id, KRN_ENGINE_VLLM);
    assert_string_equal(s->config_env, "SGLANG_MOE_CONFIG_DIR");
    assert_string_equal(v->config_env, "VLLM_TUNED_CONFIG_FOLDER");
    assert_string_equal(v->display, "vLLM");
    assert_ptr_equal(krn_engine_get(KRN_ENGINE_VLLM), v);
    assert_string_equal(krn_engine_get(0)->name, "sglang"); /* the default */
    assert_null(krn_engine_find(NULL));
    assert_null(krn_engine_find(""));
    assert_null(krn_engine_find("SGLang"));
    assert_null(krn_engine_find("moetune"));
    assert_null(krn_engine_find("sglang,vllm"));
    assert_string_equal(KRN_ENGINE_NAMES, "sglang, vllm");
    assert_string_equal(KRN_ENGINE_ALL, "sglang,vllm");
}

static void test_lists(void **state) {
    (void)state;
    static const char *const good[] = {"sglang", "vllm", "sglang,vllm", "vllm,sglang"};
    static const char *const bad[] = {"",
                                      ",",
                                      "sglang,",
                                      ",vllm",
                                      "sglang,,vllm",
                                      "sglang,sglang",
                                      "vllm,vllm",
                                      "sglang,vllm,sglang",
                                      "sglang vllm",
                                      "moetune",
                                      "sglang,moetune"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) assert_true(krn_engines_valid(good[i]));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) assert_false(krn_engines_valid(bad[i]));
    assert_false(krn_engines_valid(NULL));
    assert_true(krn_engines_has("sglang,vllm", "vllm"));
    assert_true(krn_engines_has("vllm", "vllm"));
    assert_false(krn_engines_has("vllm", "vll"));
    assert_false(krn_engines_has("sglang,vllm", "sglang,"));
    assert_false(krn_engines_has("sglang", ""));
    assert_false(krn_engines_has(NULL, "vllm"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_find), cmocka_unit_test(test_lists)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
