/* memra-bench subcommands. Each takes the arguments after its name (argv[0] is the subcommand name),
 * prints a table to stdout and returns a process exit status (0 ok, 2 usage error, 1 failure). */
#ifndef MEMRA_BENCH_H
#define MEMRA_BENCH_H

/* Mailbox hand-off latency between two threads (actors/mailbox.h): ping-pong and timestamped one-way. */
int bench_mailbox(int argc, char **argv);

#endif
