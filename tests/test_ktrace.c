/* memra-bench's kernel-timeline arithmetic (tools/memra-bench/ktrace_report.c) on made-up records: what each
 * kernel adds to a step when kernels overlap (PDL, other streams) or leave gaps, grouping, and the CSV and
 * Perfetto files, the kernels merged into a runtime trace, and the refusals of a build without CUPTI. The CUPTI side (cuda/ktrace.cu) needs a GPU and is
 * run by scripts/gpu-check ktrace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/trace.h"
#include "cuda/ktrace.h"
#include "ktrace_report.h"
#include "support/gguf_tiny.h"

/* The group of (name, grid) (name NULL: the idle row); fails the test when there is none. */
static const bench_kt_group *group_of(const bench_kt_group *g, const bench_kt_summary *s, const char *name, int grid)
{
    for (size_t k = 0; k < s->n_groups; k++)
        if (name ? g[k].name && !strcmp(g[k].name, name) && g[k].grid == grid : !g[k].name)
            return &g[k];
    fail_msg("no group %s grid %d", name ? name : "(idle)", grid);
    return NULL;
}

/* bench_kt_analyse, asserted to succeed and to split the span exactly among the rows. */
static void analysed(bench_kt_rec *r, size_t n, bench_kt_group *g, bench_kt_summary *s)
{
    dev_err err = {0};
    assert_int_equal(bench_kt_analyse(r, n, g, s, &err), 0);
    double t = 0.0;
    for (size_t k = 0; k < s->n_groups; k++)
        t += g[k].inc_ns;
    assert_true(t == s->span_ns);
}

/* bench_kt_print's table (of n kernels over `units`) into buf (size bytes, NUL-terminated). */
static void printed(const bench_kt_group *g, const bench_kt_summary *s, size_t n, int units, char *buf, size_t size)
{
    FILE *f = fmemopen(buf, size - 1, "w");
    assert_non_null(f);
    bench_kt_print(f, g, s, n, units);
    fclose(f);
}

static void test_a_gap_goes_to_the_idle_row_and_the_increments_add_up_to_the_span(void **state)
{
    (void)state;
    bench_kt_rec r[] = {{120, 130, "c", 1, 32, 8, 0, 0}, {100, 110, "a", 1, 32, 8, 0, 0}, {112, 120, "b", 1, 32, 8, 0, 0}};
    bench_kt_group g[4];
    bench_kt_summary s;
    analysed(r, 3, g, &s);
    assert_int_equal(s.t0, 100);
    assert_true(s.span_ns == 30.0 && s.busy_ns == 28.0);
    assert_int_equal(s.n_groups, 4);
    assert_true(group_of(g, &s, NULL, 0)->inc_ns == 2.0 && group_of(g, &s, NULL, 0)->count == 1);
    assert_true(group_of(g, &s, "a", 1)->inc_ns == 10.0);
    assert_true(group_of(g, &s, "b", 1)->inc_ns == 8.0); /* 120 - 110, less the 2 ns nothing ran */
    assert_true(group_of(g, &s, "b", 1)->lead_ns == 2.0);
    assert_true(group_of(g, &s, "c", 1)->inc_ns == 10.0);
    assert_true(r[0].end <= r[1].end && r[1].end <= r[2].end); /* sorted by end */
    assert_true(s.gap_ns == 2.0 && s.gap_at_ns == 10.0); /* 110..112 */
    assert_string_equal(s.gap_after, "a");
    assert_string_equal(s.gap_before, "b");
}

/* Of several gaps the longest is named, with the kernel that ended the busy stretch before it (the one ending
 * last, not the one starting last) and the one after it. */
static void test_the_longest_gap_names_the_kernels_around_it(void **state)
{
    (void)state;
    bench_kt_rec r[] = {{0, 50, "long", 1, 1, 1, 0, 0},  {10, 20, "short", 1, 1, 1, 1, 0},
                        {60, 70, "x", 1, 1, 1, 0, 0},    {170, 180, "after", 1, 1, 1, 0, 0},
                        {75, 90, "y", 1, 1, 1, 0, 0},    {80, 100, "z", 1, 1, 1, 1, 0}};
    bench_kt_group g[7];
    bench_kt_summary s;
    analysed(r, 6, g, &s);
    assert_true(s.gap_ns == 70.0 && s.gap_at_ns == 100.0);
    assert_string_equal(s.gap_after, "z");
    assert_string_equal(s.gap_before, "after");
    assert_true(group_of(g, &s, NULL, 0)->inc_ns == 10.0 + 5.0 + 70.0 && group_of(g, &s, NULL, 0)->count == 3);
    char buf[4096] = "";
    printed(g, &s, 6, 1, buf, sizeof buf);
    assert_non_null(strstr(buf, "longest idle gap: 0.1 us at +0.1 us, after z, before after; span without it 0.1 us "
                                "per unit\n")); /* (180 - 70) ns */
    /* microseconds that read back: a 2 ms stall in a 4 ms span of 2 units leaves 1000 us per unit */
    bench_kt_rec big[] = {{0, 1000000, "a", 1, 1, 1, 0, 0}, {3000000, 4000000, "b", 1, 1, 1, 0, 0}};
    analysed(big, 2, g, &s);
    printed(g, &s, 2, 2, buf, sizeof buf);
    assert_non_null(strstr(buf, "longest idle gap: 2000.0 us at +1000.0 us, after a, before b; span without it "
                                "1000.0 us per unit\n"));
}

/* A[0,20] with B[5,10] inside it and C[15,30] started early (PDL): no idle time, each adds 10, leads say who
 * started before its predecessor ended. */
static void test_overlap_is_counted_once_for_the_kernel_that_ends_first(void **state)
{
    (void)state;
    bench_kt_rec r[] = {{0, 20, "a", 1, 1, 1, 0, 0}, {5, 10, "b", 1, 1, 1, 1, 0}, {15, 30, "c", 1, 1, 1, 0, 0}};
    bench_kt_group g[4];
    bench_kt_summary s;
    analysed(r, 3, g, &s);
    assert_true(s.span_ns == 30.0 && s.busy_ns == 30.0);
    assert_true(group_of(g, &s, NULL, 0)->inc_ns == 0.0 && group_of(g, &s, NULL, 0)->count == 0);
    assert_true(group_of(g, &s, "b", 1)->inc_ns == 10.0 && group_of(g, &s, "b", 1)->lead_ns == 5.0);
    assert_true(group_of(g, &s, "a", 1)->inc_ns == 10.0 && group_of(g, &s, "a", 1)->lead_ns == -10.0);
    assert_true(group_of(g, &s, "c", 1)->inc_ns == 10.0 && group_of(g, &s, "c", 1)->lead_ns == -5.0);
    assert_true(s.gap_ns == 0.0 && !s.gap_after && !s.gap_before);
}

/* Same kernel and grid: one row; another grid or another template instance: rows of their own, largest
 * increment first; the short name is the identifier inside the mangled one. */
static void test_groups_keep_grids_and_template_instances_apart(void **state)
{
    (void)state;
    const char *k1 = "_Z3fooILi1EEvv", *k2 = "_Z3fooILi2EEvv";
    bench_kt_rec r[] = {{0, 10, k1, 64, 128, 40, 0, 0}, {10, 20, k1, 64, 128, 40, 0, 0}, {20, 40, k1, 32, 128, 40, 0, 0},
                        {40, 45, k2, 64, 128, 48, 0, 0}};
    bench_kt_group g[5];
    bench_kt_summary s;
    analysed(r, 4, g, &s);
    assert_int_equal(s.n_groups, 4); /* three kernels' rows and the idle row */
    assert_true(group_of(g, &s, k1, 64)->count == 2 && group_of(g, &s, k1, 64)->run_ns == 20.0);
    assert_true(group_of(g, &s, k1, 32)->count == 1 && group_of(g, &s, k2, 64)->regs == 48);
    for (size_t k = 1; k < s.n_groups; k++)
        assert_true(g[k - 1].inc_ns >= g[k].inc_ns);
    int len;
    const char *sh = bench_kt_short(k2, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(sh, "foo", 3);
    assert_string_equal(bench_kt_short("plain_kernel", &len), "plain_kernel");
    assert_int_equal(len, 12);
    assert_string_equal(bench_kt_short("_Z99short", &len), "_Z99short"); /* a length past the end: as is */
}

static void test_no_records_and_a_record_that_ends_before_it_starts_are_refused(void **state)
{
    (void)state;
    bench_kt_group g[2];
    bench_kt_summary s;
    dev_err err = {0};
    assert_int_equal(bench_kt_analyse(NULL, 0, g, &s, &err), MEMRA_E_INVAL);
    assert_non_null(strstr(err.msg, "no kernel records"));
    bench_kt_rec r[] = {{50, 40, "x", 1, 1, 1, 0, 0}};
    dev_err e2 = {0};
    assert_int_equal(bench_kt_analyse(r, 1, g, &s, &e2), MEMRA_E_INVAL);
    assert_non_null(strstr(e2.msg, "ends (40) before it starts (50)"));
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 14];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The table names the idle row; the CSV has a line per kernel; the JSON is Chrome trace events with the
 * short name, microseconds from t0 and the full symbol escaped; an unwritable path is an MEMRA_E_IO. */
static void test_the_table_the_csv_and_the_perfetto_trace(void **state)
{
    (void)state;
    bench_kt_rec r[] = {{1000, 3500, "_Z7rmsnormv", 1, 1024, 32, 7, 1}, {4000, 9000, "odd\"name", 528, 128, 80, 7, 1}};
    bench_kt_group g[3];
    bench_kt_summary s;
    dev_err err = {0};
    analysed(r, 2, g, &s);
    char table[4096] = {0};
    printed(g, &s, 2, 2, table, sizeof table);
    assert_non_null(strstr(table, "2 kernels, span 4.0 us per unit (2 units), kernels running 93.8 % of it"));
    assert_non_null(strstr(table, "(no kernel running)"));
    assert_non_null(strstr(table, "rmsnorm "));
    char csv[256];
    assert_int_equal(gguf_tiny_temp_path(csv, sizeof csv, "ktrace", &err), 0);
    assert_int_equal(bench_kt_write(csv, r, 2, s.t0, &err), 0);
    const char *c = slurp(csv);
    assert_non_null(strstr(c, "start_us,end_us,kernel,grid,block,regs,stream,device\n"));
    assert_non_null(strstr(c, "0.000,2.500,_Z7rmsnormv,1,1024,32,7,1\n"));
    assert_non_null(strstr(c, "3.000,8.000,odd\"name,528,128,80,7,1\n"));
    remove(csv);
    char json[sizeof csv + 8];
    snprintf(json, sizeof json, "%s.json", csv);
    assert_int_equal(bench_kt_write(json, r, 2, s.t0, &err), 0);
    const char *j = slurp(json);
    assert_non_null(strstr(j, "\"traceEvents\":["));
    assert_non_null(strstr(j, "{\"name\":\"rmsnorm\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":0.000,\"dur\":2.500,"
                              "\"pid\":1,\"tid\":7,\"args\":{\"grid\":1,\"block\":1024,\"regs\":32,"
                              "\"symbol\":\"_Z7rmsnormv\"}}"));
    assert_non_null(strstr(j, "\"name\":\"odd\\\"name\""));
    assert_non_null(strstr(j, "\n]}\n"));
    remove(json);
    dev_err e2 = {0};
    assert_int_equal(bench_kt_write("/nonexistent-dir/x.csv", r, 2, s.t0, &e2), MEMRA_E_IO);
    assert_non_null(strstr(e2.msg, "/nonexistent-dir/x.csv"));
}

/* --kernel-trace with --trace: the kernels, on CUPTI's clock 5 s ahead of the host's and drifting 1 us over the
 * recording (1 ns per us: a 2 us kernel lasts 1.998 us on the host clock), land in the runtime trace's file on the
 * host clock, a lane per device and stream; a kernel that ended
 * before the trace began is left out, and without a trace recording the merge is refused. */
static void test_kernels_merge_into_the_runtime_trace_on_the_host_clock(void **state)
{
    (void)state;
    dev_err err = {0};
    const bench_kt_rec one = {1, 2, "k", 1, 1, 1, 0, 0};
    const bench_kt_clock c0 = {0, 0, 0, 0};
    assert_int_equal(bench_kt_merge_into_trace(&one, 1, &c0, &err), MEMRA_E_STATE);
    char path[256];
    assert_int_equal(gguf_tiny_temp_path(path, sizeof path, "ktrace-merge", &err), 0);
    static int owner;
    assert_int_equal(act_trace_start(&owner, path, 2, &err), 0);
    const uint64_t h = act_trace_now_ns() + 1000000; /* 1 ms after the trace's start, on the host clock */
    const uint64_t ahead = 5000000000u;
    const bench_kt_clock c = {h + ahead, h + ahead + 1000000, (int64_t)ahead, (int64_t)ahead + 1000};
    assert_int_equal(bench_kt_to_host(&c, h + ahead + 500000), h + 500000 - 500); /* half the drift */
    const bench_kt_rec r[3] = {{h + ahead + 1000, h + ahead + 3000, "_Z4gemmv", 8, 128, 64, 7, 1},
                               {h + ahead + 2000, h + ahead + 4000, "norm", 1, 256, 32, 9, 1},
                               {h + ahead - 2000000, h + ahead - 1900000, "early", 1, 1, 1, 7, 1}};
    assert_int_equal(bench_kt_merge_into_trace(r, 3, &c, &err), 0);
    assert_int_equal(bench_kt_merge_into_trace(r, 3, &c, &err), MEMRA_E_STATE); /* one source per trace */
    assert_int_equal(act_trace_stop(&owner, NULL, &err), 0);
    bench_kt_merge_release();
    const char *j = slurp(path);
    assert_non_null(j);
    assert_non_null(strstr(j, "\"args\":{\"name\":\"gpu 1 stream 7 kernels\"}"));
    assert_non_null(strstr(j, "\"args\":{\"name\":\"gpu 1 stream 9 kernels\"}"));
    assert_non_null(strstr(j, ",\"dur\":1.998,\"cat\":\"kernel\",\"name\":\"gemm\",\"args\":{\"grid\":8"));
    assert_null(strstr(j, "early"));
    assert_non_null(strstr(j, "\n]}\n"));
    remove(path);
}

/* This test is built without CUPTI (MEMRA_HAVE_CUPTI unset): every verb refuses, naming what is missing. */
static void test_without_cupti_every_verb_refuses_with_the_reason(void **state)
{
    (void)state;
    assert_int_equal(bench_ktrace_available(), 0);
    dev_err e1 = {0}, e2 = {0};
    assert_int_equal(bench_ktrace_start(&e1), MEMRA_E_UNSUPPORTED);
    assert_int_equal(bench_ktrace_stop(stdout, NULL, 1, 0, &e2), MEMRA_E_UNSUPPORTED);
    assert_non_null(strstr(e1.msg, "CUPTI"));
    assert_non_null(strstr(e2.msg, "CUPTI"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_gap_goes_to_the_idle_row_and_the_increments_add_up_to_the_span),
        cmocka_unit_test(test_overlap_is_counted_once_for_the_kernel_that_ends_first),
        cmocka_unit_test(test_the_longest_gap_names_the_kernels_around_it),
        cmocka_unit_test(test_groups_keep_grids_and_template_instances_apart),
        cmocka_unit_test(test_no_records_and_a_record_that_ends_before_it_starts_are_refused),
        cmocka_unit_test(test_the_table_the_csv_and_the_perfetto_trace),
        cmocka_unit_test(test_kernels_merge_into_the_runtime_trace_on_the_host_clock),
        cmocka_unit_test(test_without_cupti_every_verb_refuses_with_the_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
