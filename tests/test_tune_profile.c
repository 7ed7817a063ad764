/* memra-tune's profile applied by memra_runtime_create (memra_runtime_params.profile, MEMRA_PP_PROFILE): its
 * placement and knobs taken, and a profile made for another model, stage count, device set or backend refused
 * naming which. Profiles are written here for the tiny model of tests/support/api_tiny.c (4 layers) and for the
 * synthetic shape "tiny" (8 layers, no file: api_model_open). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "api/api_internal.h"
#include "api/api_profile.h"
#include "model/gguf_synth.h"
#include "support/api_tiny.h"

static char prof_path[256];

/* A profile for the tiny model with the given fields changed from what fits it (NULL / -1 = fits). */
typedef struct prof {
    long long file_size; /* -1: the file's */
    int n_layer;         /* -1: the model's */
    const char *backend; /* NULL: "cpu" */
    int stages;          /* 2 */
    const char *devices; /* "[1, 2]" */
    const char *cuts;    /* "[3]" */
    const char *raw;     /* non-NULL: the whole file */
    const memra_model *m; /* NULL: the tiny file model */
    const char *synth;   /* non-NULL: the model's "synthetic" member */
    const char *setting; /* non-NULL: more members of "setting" (", \"graph\": 1") */
} prof;

static void write_profile(const prof *p)
{
    const memra_model *m = p->m ? p->m : api_tiny_model;
    FILE *f = fopen(prof_path, "w");
    assert_non_null(f);
    if (p->raw) {
        fputs(p->raw, f);
        fclose(f);
        return;
    }
    struct stat st = {0};
    assert_true(m->synth || stat(api_tiny_path, &st) == 0);
    fprintf(f,
            "{\"memra_tune_profile\": 1,\n"
            " \"model\": {\"path\": \"x\", \"file_size\": %lld, \"arch\": \"llama\", \"n_layer\": %d, \"n_embd\": %d,"
            " \"n_vocab\": %d%s%s},\n"
            " \"backend\": \"%s\", \"stages\": %d, \"devices\": %s,\n"
            " \"setting\": {\"cuts\": %s, \"overlap\": 1, \"slots\": 3, \"micro_batches\": 1, \"max_rows\": 24%s}}\n",
            p->file_size >= 0 ? p->file_size : (long long)st.st_size,
            p->n_layer >= 0 ? p->n_layer : memra_model_n_layer(m), memra_model_n_embd(m), memra_model_n_vocab(m),
            p->synth ? ", \"synthetic\": " : "", p->synth ? p->synth : "", p->backend ? p->backend : "cpu",
            p->stages ? p->stages : 2, p->devices ? p->devices : "[1, 2]", p->cuts ? p->cuts : "[3]",
            p->setting ? p->setting : "");
    fclose(f);
}

static int setup(void **state)
{
    snprintf(prof_path, sizeof prof_path, "/tmp/memra_test_tune_profile_%d.json", (int)getpid());
    return api_tiny_setup(state);
}

static int teardown(void **state)
{
    unlink(prof_path);
    unsetenv("MEMRA_PP_PROFILE");
    return api_tiny_teardown(state);
}

#ifdef MEMRA_HAVE_CJSON
/* Create with the profile written from p and runtime params q; expect a refusal naming `what`. */
static void expect_refused(const prof *p, memra_runtime_params q, int code, const char *what)
{
    write_profile(p);
    q.profile = prof_path;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &q);
    if (rt) {
        memra_runtime_free(rt);
        fail_msg("a profile that should be refused for '%s' was applied", what);
    }
    api_tiny_assert_error(memra_last_error(), code, what);
}

static void test_a_profile_sets_the_placement_and_the_knobs(void **state)
{
    (void)state;
    write_profile(&(prof){.file_size = -1, .n_layer = -1});
    memra_runtime_params q = api_tiny_params(1); /* asks for no placement: the profile's */
    q.profile = prof_path;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &q);
    assert_non_null(rt);
    assert_int_equal(memra_runtime_n_stages(rt), 2);
    int a, b;
    assert_int_equal(memra_runtime_stage_layers(rt, 0, &a, &b), 0);
    assert_int_equal(b, 3); /* the profile's cut, not the even 2 */
    assert_int_equal(memra_runtime_max_rows(rt), 24);
    assert_int_equal(rt->micro_batches, 1);
    memra_runtime_free(rt);
}

static void test_the_door_wins_over_the_field(void **state)
{
    (void)state;
    write_profile(&(prof){.file_size = -1, .n_layer = -1, .cuts = "[1]"});
    setenv("MEMRA_PP_PROFILE", prof_path, 1);
    memra_runtime_params q = api_tiny_params(1);
    q.apply_env = 1;
    q.profile = "/nonexistent/profile.json";
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &q);
    unsetenv("MEMRA_PP_PROFILE");
    assert_non_null(rt);
    int a, b;
    assert_int_equal(memra_runtime_stage_layers(rt, 1, &a, &b), 0);
    assert_int_equal(a, 1);
    memra_runtime_free(rt);
    setenv("MEMRA_PP_PROFILE", "", 1);
    assert_null(memra_runtime_create(api_tiny_model, &q));
    unsetenv("MEMRA_PP_PROFILE");
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "MEMRA_PP_PROFILE is set but empty");
}

static void test_a_profile_for_another_model_is_refused_naming_the_field(void **state)
{
    (void)state;
    expect_refused(&(prof){.file_size = -1, .n_layer = 30}, api_tiny_params(1), MEMRA_E_INVAL,
                   "made for another model: n_layer 30 in the profile, 4 in");
    expect_refused(&(prof){.file_size = 12345, .n_layer = -1}, api_tiny_params(1), MEMRA_E_INVAL,
                   "made for another model: file_size 12345");
}

static void test_a_profile_for_another_stage_count_is_refused(void **state)
{
    (void)state;
    expect_refused(&(prof){.file_size = -1, .n_layer = -1}, api_tiny_params(3), MEMRA_E_INVAL,
                   "made for another stage count: 2 stages in the profile, 3 asked");
}

static void test_a_profile_for_another_device_set_is_refused(void **state)
{
    (void)state;
    expect_refused(&(prof){.file_size = -1, .n_layer = -1}, api_tiny_params(2), MEMRA_E_INVAL,
                   "made for another device set"); /* asks devices 0,1; the profile's are 1,2 */
    expect_refused(&(prof){.file_size = -1, .n_layer = -1, .backend = "cuda"}, api_tiny_params(1), MEMRA_E_INVAL,
                   "made for another device set: backend cuda");
}

static void test_a_malformed_profile_is_refused_naming_the_key(void **state)
{
    (void)state;
    expect_refused(&(prof){.raw = "{\"memra_tune_profile\": 1, "}, api_tiny_params(1), MEMRA_E_INVAL, "not JSON");
    expect_refused(&(prof){.raw = "[1]"}, api_tiny_params(1), MEMRA_E_INVAL, "\"memra_tune_profile\"");
    expect_refused(&(prof){.file_size = -1, .n_layer = -1, .cuts = "[3, 1]"}, api_tiny_params(1), MEMRA_E_INVAL,
                   "key \"cuts\" must be an array of 1 integers");
    expect_refused(&(prof){.file_size = -1, .n_layer = -1, .cuts = "[4]"}, api_tiny_params(1), MEMRA_E_INVAL,
                   "key \"cuts\" entry 0 must be an integer in 1..3");
    memra_runtime_params q = api_tiny_params(1);
    q.profile = "/nonexistent/profile.json";
    assert_null(memra_runtime_create(api_tiny_model, &q));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_IO, "/nonexistent/profile.json: cannot read the profile");
}

static void test_a_profile_takes_graphs_on_when_it_says_so(void **state)
{
    (void)state;
    memra_runtime_params q = api_tiny_params(1);
    dev_err err = {0};
    q.profile = prof_path;
    write_profile(&(prof){.file_size = -1, .n_layer = -1});
    assert_int_equal(api_profile_apply(api_tiny_model, &q, &err), 0);
    assert_int_equal(q.graph, 0); /* absent: eager walks */
    write_profile(&(prof){.file_size = -1, .n_layer = -1, .setting = ", \"graph\": 1"});
    assert_int_equal(api_profile_apply(api_tiny_model, &q, &err), 0);
    assert_int_equal(q.graph, 1);
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &q); /* the CPU backend walks eagerly: it still runs */
    assert_non_null(rt);
    memra_runtime_free(rt);
    expect_refused(&(prof){.file_size = -1, .n_layer = -1, .setting = ", \"graph\": 2"}, api_tiny_params(1),
                   MEMRA_E_INVAL, "key \"graph\" must be an integer in 0..1");
}

#define TINY_SYNTH "{\"name\": \"tiny\", \"type\": \"q4_1\", \"n_head\": 4, \"n_head_kv\": 2, \"n_ff\": %d}"

static void test_a_profile_for_a_synthetic_shape_names_it_and_is_refused_for_another(void **state)
{
    (void)state;
    memra_model *syn = api_model_open(NULL, "tiny", "q4_1"), *bf = api_model_open(NULL, "tiny", "bf16");
    assert_non_null(syn);
    assert_non_null(bf);
    char fits[256], other_ff[256];
    snprintf(fits, sizeof fits, TINY_SYNTH, syn->synth->n_ff);
    snprintf(other_ff, sizeof other_ff, TINY_SYNTH, syn->synth->n_ff * 2);
    write_profile(&(prof){.file_size = -1, .n_layer = -1, .m = syn, .synth = fits, .cuts = "[5]"});
    memra_runtime_params q = api_tiny_params(1);
    q.profile = prof_path;
    memra_runtime *rt = memra_runtime_create(syn, &q);
    assert_non_null(rt);
    int a, b;
    assert_int_equal(memra_runtime_stage_layers(rt, 0, &a, &b), 0);
    assert_int_equal(b, 5); /* the profile's cut */
    memra_runtime_free(rt);
    write_profile(&(prof){.file_size = -1, .n_layer = -1, .m = syn, .synth = fits, .cuts = "[5]"});
    assert_null(memra_runtime_create(bf, &q)); /* the same shape, bf16 weights */
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "synthetic tiny q4_1 in the profile, tiny bf16 asked");
    write_profile(&(prof){.file_size = -1, .n_layer = -1, .m = syn, .synth = other_ff, .cuts = "[5]"});
    assert_null(memra_runtime_create(syn, &q));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "made for another model: synthetic n_ff");
    /* no "synthetic": a file's profile */
    write_profile(&(prof){.file_size = -1, .n_layer = -1, .m = syn, .cuts = "[5]"});
    assert_null(memra_runtime_create(syn, &q));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "a GGUF file in the profile, the synthetic shape tiny");
    expect_refused(&(prof){.file_size = -1, .n_layer = -1, .synth = fits}, api_tiny_params(1), MEMRA_E_INVAL,
                   "a synthetic shape in the profile, the file");
    memra_model_free(syn);
    memra_model_free(bf);
}
#else
static void test_a_build_without_cjson_refuses_a_profile(void **state)
{
    (void)state;
    write_profile(&(prof){.file_size = -1, .n_layer = -1});
    memra_runtime_params q = api_tiny_params(1);
    q.profile = prof_path;
    assert_null(memra_runtime_create(api_tiny_model, &q));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_UNSUPPORTED, "lacks cJSON");
}
#endif

static void test_no_profile_leaves_the_params_as_they_are(void **state)
{
    (void)state;
    memra_runtime_params q = api_tiny_params(2);
    assert_null(q.profile);
    memra_runtime *r2 = memra_runtime_create(api_tiny_model, &q);
    assert_non_null(r2);
    int a, b;
    assert_int_equal(memra_runtime_stage_layers(r2, 0, &a, &b), 0);
    assert_int_equal(b, 2); /* the even cut */
    memra_runtime_free(r2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifdef MEMRA_HAVE_CJSON
        cmocka_unit_test(test_a_profile_sets_the_placement_and_the_knobs),
        cmocka_unit_test(test_the_door_wins_over_the_field),
        cmocka_unit_test(test_a_profile_for_another_model_is_refused_naming_the_field),
        cmocka_unit_test(test_a_profile_for_another_stage_count_is_refused),
        cmocka_unit_test(test_a_profile_for_another_device_set_is_refused),
        cmocka_unit_test(test_a_malformed_profile_is_refused_naming_the_key),
        cmocka_unit_test(test_a_profile_takes_graphs_on_when_it_says_so),
        cmocka_unit_test(test_a_profile_for_a_synthetic_shape_names_it_and_is_refused_for_another),
#else
        cmocka_unit_test(test_a_build_without_cjson_refuses_a_profile),
#endif
        cmocka_unit_test(test_no_profile_leaves_the_params_as_they_are),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
