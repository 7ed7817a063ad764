/* Runtime tracing (actors/trace, memra_runtime_trace_start/stop, MEMRA_TRACE): a 2-stage CPU run of the tiny
 * model records its stages, streams, hops, readback and requests. The trace of the first test is kept at
 * $MEMRA_BIN_DIR/tests/trace-tiny.json for tests/trace_check.py (a real JSON parser checks its structure). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "actors/trace.h"
#include "memra/memra.h"
#include "support/api_tiny.h"

#define NREQ 6
#define GEN 6

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

static void kept_path(char *out, size_t n)
{
    const char *bin = getenv("MEMRA_BIN_DIR");
    if (bin)
        snprintf(out, n, "%s/tests/trace-tiny.json", bin);
    else
        snprintf(out, n, "/tmp/memra-trace-tiny-%d.json", (int)getpid());
}

/* NREQ requests through memra_generate (the scheduler), some greedy, some sampled. */
static void run_requests(memra_runtime *rt)
{
    memra_token prompt[NREQ][12], out[NREQ][GEN];
    memra_request r[NREQ];
    for (int i = 0; i < NREQ; i++) {
        api_tiny_prompt(prompt[i], 4 + i, 50 + i);
        r[i] = (memra_request){.prompt = prompt[i], .n_prompt = 4 + i, .n_predict = GEN,
                               .sampling = memra_sampler_greedy_params(), .out = out[i], .out_cap = GEN};
    }
    assert_int_equal(memra_generate(rt, r, NREQ, 0, NULL, NULL), MEMRA_OK);
    for (int i = 0; i < NREQ; i++)
        assert_int_equal(r[i].n_out, GEN);
}

/* First in the group: nothing has traced in this process yet. */
static void test_an_untraced_run_allocates_no_trace_buffer(void **state)
{
    (void)state;
    memra_runtime_params p = api_tiny_params(2);
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    run_requests(rt);
    memra_runtime_free(rt);
    assert_false(act_trace_on());
    assert_int_equal(act_trace_n_buffers(), 0);
}

static void test_a_two_stage_run_traced_writes_every_stage_stream_hop_and_request(void **state)
{
    (void)state;
    char path[512];
    kept_path(path, sizeof path);
    remove(path);
    memra_runtime_params p = api_tiny_params(2);
    p.n_seq = 4;
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    assert_int_equal(memra_runtime_trace_start(rt, path), MEMRA_OK);
    assert_true(act_trace_on());
    run_requests(rt);
    assert_int_equal(memra_runtime_trace_stop(rt), MEMRA_OK);
    assert_false(act_trace_on());
    assert_true(act_trace_n_buffers() >= 4); /* 2 stage actors and their 2 stream workers at least */
    memra_runtime_free(rt);
    char *j = slurp(path);
    assert_non_null(j);
    static const char *const want[] = {"\"stage 0 actor\"", "\"stage 1 actor\"", "\"stage 0 stream\"",
                                       "\"stage 1 stream\"", "\"boundary 0 hops\"", "\"readback\"",
                                       "\"name\":\"walk\"", "\"name\":\"hop\"", "\"name\":\"queued\"",
                                       "\"name\":\"first token\"", "\"name\":\"done\"", "\"group\":1", "\"credits held stage 0\"", "\"steps in flight\"", "\"ph\":\"f\"",
                                       "\"dropped\":0"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(j, want[i]))
            fail_msg("the trace has no %s", want[i]);
    free(j);
}

static void test_a_second_trace_is_refused_while_one_records(void **state)
{
    (void)state;
    memra_runtime_params p = api_tiny_params(2);
    memra_runtime *a = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(a);
    memra_runtime *b = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(b);
    char pa[64], pb[64];
    snprintf(pa, sizeof pa, "/tmp/memra-trace-a-%d.json", (int)getpid());
    snprintf(pb, sizeof pb, "/tmp/memra-trace-b-%d.json", (int)getpid());
    assert_int_equal(memra_runtime_trace_start(a, pa), MEMRA_OK);
    assert_int_equal(memra_runtime_trace_start(b, pb), MEMRA_E_STATE);
    api_tiny_assert_error(memra_runtime_last_error(b), MEMRA_E_STATE, pa);
    assert_int_equal(memra_runtime_trace_stop(b), MEMRA_E_STATE);
    assert_int_equal(memra_runtime_trace_stop(a), MEMRA_OK);
    assert_int_equal(memra_runtime_trace_stop(a), MEMRA_E_STATE);
    assert_int_equal(memra_runtime_trace_start(a, "/nonexistent-dir/t.json"), MEMRA_E_INVAL);
    api_tiny_assert_error(memra_runtime_last_error(a), MEMRA_E_INVAL, "/nonexistent-dir/t.json");
    assert_int_equal(memra_runtime_trace_start(a, ""), MEMRA_E_INVAL);
    assert_int_equal(memra_runtime_trace_start(NULL, pa), MEMRA_E_INVAL);
    memra_runtime_free(b);
    memra_runtime_free(a);
    remove(pa);
    remove(pb);
}

static void test_memra_trace_door_writes_the_file_at_free_and_refuses_an_empty_path(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/memra-trace-door-%d.json", (int)getpid());
    remove(path);
    memra_runtime_params p = api_tiny_params(2);
    p.apply_env = 1;
    setenv("MEMRA_TRACE", "", 1);
    assert_null(memra_runtime_create(api_tiny_model, &p));
    api_tiny_assert_error(memra_last_error(), MEMRA_E_INVAL, "MEMRA_TRACE=");
    setenv("MEMRA_TRACE", path, 1);
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    unsetenv("MEMRA_TRACE");
    assert_non_null(rt);
    run_requests(rt);
    assert_true(act_trace_on());
    memra_runtime_free(rt);
    assert_false(act_trace_on());
    char *j = slurp(path);
    assert_non_null(j);
    assert_non_null(strstr(j, "\"stage 1 stream\""));
    assert_non_null(strstr(j, "\"name\":\"walk\""));
    free(j);
    remove(path);
}

static void test_tracing_off_records_nothing_and_starting_later_records_only_later_steps(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/memra-trace-late-%d.json", (int)getpid());
    memra_runtime_params p = api_tiny_params(2);
    memra_runtime *rt = memra_runtime_create(api_tiny_model, &p);
    assert_non_null(rt);
    run_requests(rt); /* untraced */
    assert_false(act_trace_on());
    assert_int_equal(memra_runtime_trace_start(rt, path), MEMRA_OK);
    assert_int_equal(memra_runtime_trace_stop(rt), MEMRA_OK); /* nothing ran in between */
    char *j = slurp(path);
    assert_non_null(j);
    if (strstr(j, "\"name\":\"walk\"") || strstr(j, "\"name\":\"queued\""))
        fail_msg("a trace started after the run holds the run's records:\n%.400s", j);
    free(j);
    memra_runtime_free(rt);
    remove(path);
}

/* A thread's buffer grows by chunks: more records than one chunk holds are all kept, none dropped. */
static void test_a_thread_records_past_one_chunk_without_dropping(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/memra-trace-chunks-%d.json", (int)getpid());
    static int owner;
    dev_err err = {0};
    assert_int_equal(act_trace_start(&owner, path, 1, &err), 0);
    const int n = ACT_TRACE_BUF_RECS + ACT_TRACE_BUF_RECS / 2;
    for (int i = 0; i < n; i++)
        act_trace_instant(ACT_TR_REQ_QUEUED, ACT_TRACE_SCHED, act_trace_now_ns(), UINT64_MAX, i, 0, 0);
    act_trace_stats st;
    assert_int_equal(act_trace_stop(&owner, &st, &err), 0);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.records, (uint64_t)n);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_untraced_run_allocates_no_trace_buffer),
        cmocka_unit_test(test_a_two_stage_run_traced_writes_every_stage_stream_hop_and_request),
        cmocka_unit_test(test_a_second_trace_is_refused_while_one_records),
        cmocka_unit_test(test_memra_trace_door_writes_the_file_at_free_and_refuses_an_empty_path),
        cmocka_unit_test(test_tracing_off_records_nothing_and_starting_later_records_only_later_steps),
        cmocka_unit_test(test_a_thread_records_past_one_chunk_without_dropping),
    };
    return cmocka_run_group_tests(tests, api_tiny_setup, api_tiny_teardown);
}
