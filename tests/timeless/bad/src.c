/* Fixture for scripts/check-timeless: every comment below breaks one rule (see tests/docs.cmake). */
int a; /* 37 us a step faster (run 173) */
int b; // runs 179-184 measured this
/* the ring landed in the tenth session */
static const char *s = "run 99 inside a string is code, not a comment";
