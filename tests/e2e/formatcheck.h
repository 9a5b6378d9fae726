/* formatcheck.h — strict validators for what gpupool renders, so tests prove the output is what
 * other tools will parse: JSON (RFC 8259, UTF-8) and the Prometheus text exposition format
 * (0.0.4). Test-only; used by the unit tests and, through formatcheck_main.c, by e2e scripts. */
#ifndef GPUPOOL_FORMATCHECK_H
#define GPUPOOL_FORMATCHECK_H

#include <stddef.h>

/* 0 if `text` is exactly one JSON value (surrounding whitespace allowed); else -1 and a
 * message naming the byte offset in err. */
int formatcheck_json(const char *text, char *err, size_t errlen);

/* 0 if `text` is valid exposition format in which every sample's family has a TYPE line before
 * it, families are contiguous, no series repeats and counters end in _total; else -1 and a
 * message naming the line in err. *families gets the number of TYPE lines (may be NULL). */
int formatcheck_prometheus(const char *text, int *families, char *err, size_t errlen);

#endif
