/* The prompt-lookup drafter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/draft.h"

static void test_proposes_what_followed_the_latest_match_of_the_longest_ngram(void **state)
{
    (void)state;
    /* ... 1 2 3 [4 5 6] ... 1 2 3 [7 8] ... 1 2 3 -> the latest match of "1 2 3" is followed by 7 8 */
    int32_t h[] = {1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 7, 8, 9, 1, 2, 3};
    int32_t out[4];
    int n = mdl_draft_lookup(h, 16, 1, 3, 0, out, 4);
    assert_int_equal(n, 4);
    assert_int_equal(out[0], 7);
    assert_int_equal(out[1], 8);
    assert_int_equal(out[2], 9);
    assert_int_equal(out[3], 1);
}

static void test_falls_back_to_shorter_ngrams_and_to_nothing(void **state)
{
    (void)state;
    int32_t h[] = {5, 6, 7, 8, 6};
    int32_t out[3];
    assert_int_equal(mdl_draft_lookup(h, 5, 1, 3, 0, out, 3), 3); /* "6" recurs: 7 8 6 */
    assert_int_equal(out[0], 7);
    assert_int_equal(mdl_draft_lookup(h, 5, 2, 3, 0, out, 3), 0); /* no bigram recurs */
    int32_t u[] = {1, 2, 3};
    assert_int_equal(mdl_draft_lookup(u, 3, 1, 2, 0, out, 3), 0);
}

static void test_window_limits_how_far_back_it_looks(void **state)
{
    (void)state;
    int32_t h[] = {4, 9, 1, 1, 1, 1, 4};
    int32_t out[2];
    assert_int_equal(mdl_draft_lookup(h, 7, 1, 1, 0, out, 2), 2);
    assert_int_equal(out[0], 9);
    assert_int_equal(mdl_draft_lookup(h, 7, 1, 1, 4, out, 2), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proposes_what_followed_the_latest_match_of_the_longest_ngram),
        cmocka_unit_test(test_falls_back_to_shorter_ngrams_and_to_nothing),
        cmocka_unit_test(test_window_limits_how_far_back_it_looks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
