/* out.c — the renderings' append buffer and the small formatting helpers they share.
 * Never allocates: text that does not fit is cut, and its full length is still counted. */
#include "out.h"
#include "stats.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void gp_stats_out_init(struct gp_stats_out *o, char *buf, size_t len)
{
	o->buf = buf;
	o->len = len;
	o->n = 0;
	if (len > 0)
		buf[0] = '\0';
}

static void append(struct gp_stats_out *o, const char *s, size_t k)
{
	if (o->n + 1 < o->len) {
		size_t room = o->len - 1 - o->n;
		size_t take = k < room ? k : room;

		memcpy(o->buf + o->n, s, take);
		o->buf[o->n + take] = '\0';
	}
	o->n += k;
}

void gp_stats_puts(struct gp_stats_out *o, const char *s)
{
	append(o, s, strlen(s));
}

void gp_stats_printf(struct gp_stats_out *o, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	if ((size_t)k < sizeof(small)) {
		append(o, small, (size_t)k);
		return;
	}
	/* Longer than the scratch: format straight into the buffer when it fits, else count. */
	if (o->n + (size_t)k + 1 <= o->len) {
		va_start(ap, fmt);
		vsnprintf(o->buf + o->n, (size_t)k + 1, fmt, ap);
		va_end(ap);
	}
	o->n += (size_t)k;
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if the bytes there are not one. */
static size_t utf8_len(const unsigned char *s)
{
	size_t need;
	unsigned min;
	unsigned cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		need = 2, min = 0x80, cp = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		need = 3, min = 0x800, cp = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		need = 4, min = 0x10000, cp = s[0] & 0x07;
	} else {
		return 0;
	}
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return need;
}

void gp_stats_put_escaped(struct gp_stats_out *o, const char *str, int quote)
{
	const unsigned char *s = (const unsigned char *)str;

	while (*s != '\0') {
		size_t k = utf8_len(s);

		if (k == 0) {
			append(o, "?", 1);
			s++;
			continue;
		}
		if (k > 1) {
			append(o, (const char *)s, k);
			s += k;
			continue;
		}
		if (quote && (*s == '"' || *s == '\\')) {
			append(o, "\\", 1);
			append(o, (const char *)s, 1);
		} else if (quote && *s == '\n') {
			append(o, "\\n", 2);
		} else if (quote == 'j' && *s < 0x20) {
			gp_stats_printf(o, "\\u%04x", *s);
		} else if (*s < 0x20 || *s == 0x7f) {
			append(o, "?", 1); /* control characters have no business in a command line */
		} else {
			append(o, (const char *)s, 1);
		}
		s++;
	}
}

size_t gp_stats_out_end(struct gp_stats_out *o)
{
	return o->n;
}

const char *gp_stats_human_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	while (v >= 1024.0 && u < 4) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}
