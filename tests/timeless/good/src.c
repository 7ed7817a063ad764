/* Fixture for scripts/check-timeless: nothing here breaks a rule (see tests/docs.cmake). */
static long now_ns(void) { return 0; }
int session_count; /* a test runs 200 000 messages; each run 4 steps */
/* from now on the stream owns p; what was wrong is named (docs/bench/gpu.md "Decode, one sequence") */
static const char *s = "run 173 inside a string is code";
