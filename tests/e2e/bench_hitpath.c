/* bench_hitpath.c — bench/hitpath.cu built as C against the stand-in runtime, so that the GPU
 * benchmark's own logic (every contender's loop, the driver entry-point lookup, the table) runs
 * in CI: check_hitpath.sh runs it plain and preloaded and checks its lines. */
#define _GNU_SOURCE /* clock_gettime, RTLD_DEFAULT and RTLD_NOLOAD, as C++ compilers give them */
#include "../../bench/hitpath.cu"
