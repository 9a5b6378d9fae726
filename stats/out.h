/* out.h — the append buffer the renderings write into (internal to stats/): snprintf semantics
 * over many appends, so a caller learns the full length even when its buffer is short; never
 * writes past the buffer. */
#ifndef GPUPOOL_STATS_OUT_H
#define GPUPOOL_STATS_OUT_H

#include <stddef.h>
#include <stdint.h>

struct gp_stats_out {
	char *buf;
	size_t len;  /* capacity of buf, NUL included */
	size_t n;    /* length of the full text so far */
};

void gp_stats_out_init(struct gp_stats_out *o, char *buf, size_t len);
void gp_stats_puts(struct gp_stats_out *o, const char *s);
void gp_stats_printf(struct gp_stats_out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* s with every byte that is not part of valid UTF-8 replaced by '?', and, by `quote`:
 * 'j' JSON string escapes, 'p' Prometheus label-value escapes, 0 none. */
void gp_stats_put_escaped(struct gp_stats_out *o, const char *s, int quote);
size_t gp_stats_out_end(struct gp_stats_out *o);

#endif
