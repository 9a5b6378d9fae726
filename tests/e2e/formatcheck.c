/* formatcheck.c — a validating JSON parser (recursive descent over RFC 8259, strings checked as
 * UTF-8) and a Prometheus text-format checker. They accept nothing the standards reject, which
 * is all the tests need; they build no values. Test-only. */
#define _GNU_SOURCE
#include "formatcheck.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

/* ---- JSON -------------------------------------------------------------------------------- */

struct json {
	const unsigned char *s, *start;
	char *err;
	size_t errlen;
};

static int jfail(struct json *j, const char *what)
{
	snprintf(j->err, j->errlen, "JSON: %s at byte %zu", what, (size_t)(j->s - j->start));
	return -1;
}

static void jspace(struct json *j)
{
	while (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r')
		j->s++;
}

static int jvalue(struct json *j, int depth);

static int hex4(const unsigned char *s)
{
	for (int i = 0; i < 4; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'f')))
			return -1;
	return 0;
}

/* One UTF-8 sequence at s; its length, or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s)
{
	size_t need;
	unsigned cp, min;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		need = 2, cp = s[0] & 0x1f, min = 0x80;
	else if ((s[0] & 0xf0) == 0xe0)
		need = 3, cp = s[0] & 0x0f, min = 0x800;
	else if ((s[0] & 0xf8) == 0xf0)
		need = 4, cp = s[0] & 0x07, min = 0x10000;
	else
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	return cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : need;
}

static int jstring(struct json *j)
{
	j->s++; /* the opening quote */
	for (;;) {
		size_t k;

		if (*j->s == '"') {
			j->s++;
			return 0;
		}
		if (*j->s == '\0')
			return jfail(j, "unterminated string");
		if (*j->s < 0x20)
			return jfail(j, "control character in a string");
		if (*j->s == '\\') {
			j->s++;
			if (*j->s == 'u') {
				if (hex4(j->s + 1) != 0)
					return jfail(j, "bad \\u escape");
				j->s += 5;
			} else if (*j->s && strchr("\"\\/bfnrt", *j->s)) {
				j->s++;
			} else {
				return jfail(j, "bad escape");
			}
			continue;
		}
		k = utf8_seq(j->s);
		if (k == 0)
			return jfail(j, "invalid UTF-8 in a string");
		j->s += k;
	}
}

static int digits(struct json *j)
{
	const unsigned char *s = j->s;

	while (*j->s >= '0' && *j->s <= '9')
		j->s++;
	return j->s > s ? 0 : -1;
}

static int jnumber(struct json *j)
{
	if (*j->s == '-')
		j->s++;
	if (*j->s == '0')
		j->s++;
	else if (*j->s < '1' || *j->s > '9' || digits(j) != 0)
		return jfail(j, "bad number");
	if (*j->s == '.') {
		j->s++;
		if (digits(j) != 0)
			return jfail(j, "bad fraction");
	}
	if (*j->s == 'e' || *j->s == 'E') {
		j->s++;
		if (*j->s == '+' || *j->s == '-')
			j->s++;
		if (digits(j) != 0)
			return jfail(j, "bad exponent");
	}
	return 0;
}

static int jword(struct json *j, const char *w)
{
	size_t n = strlen(w);

	if (strncmp((const char *)j->s, w, n) != 0)
		return jfail(j, "unexpected character");
	j->s += n;
	return 0;
}

static int jcontainer(struct json *j, int depth, char close)
{
	j->s++;
	jspace(j);
	if (*j->s == (unsigned char)close) {
		j->s++;
		return 0;
	}
	for (;;) {
		jspace(j);
		if (close == '}') {
			if (*j->s != '"')
				return jfail(j, "object key is not a string");
			if (jstring(j) != 0)
				return -1;
			jspace(j);
			if (*j->s != ':')
				return jfail(j, "':' expected");
			j->s++;
		}
		if (jvalue(j, depth + 1) != 0)
			return -1;
		jspace(j);
		if (*j->s == ',') {
			j->s++;
			continue;
		}
		if (*j->s == (unsigned char)close) {
			j->s++;
			return 0;
		}
		return jfail(j, close == '}' ? "',' or '}' expected" : "',' or ']' expected");
	}
}

static int jvalue(struct json *j, int depth)
{
	if (depth > MAX_DEPTH)
		return jfail(j, "nested too deep");
	jspace(j);
	switch (*j->s) {
	case '{':
		return jcontainer(j, depth, '}');
	case '[':
		return jcontainer(j, depth, ']');
	case '"':
		return jstring(j);
	case 't':
		return jword(j, "true");
	case 'f':
		return jword(j, "false");
	case 'n':
		return jword(j, "null");
	default:
		if (*j->s == '-' || (*j->s >= '0' && *j->s <= '9'))
			return jnumber(j);
		return jfail(j, *j->s ? "unexpected character" : "unexpected end");
	}
}

int formatcheck_json(const char *text, char *err, size_t errlen)
{
	struct json j = { (const unsigned char *)text, (const unsigned char *)text, err, errlen };

	if (jvalue(&j, 0) != 0)
		return -1;
	jspace(&j);
	if (*j.s != '\0')
		return jfail(&j, "text after the value");
	return 0;
}

/* ---- Prometheus text format -------------------------------------------------------------- */

struct family {
	char name[128];
	char type[16];
	int help, sampled, closed;
};

struct prom {
	struct family *fam;
	size_t nfam, cap;
	char **series;
	size_t nseries, series_cap;
	size_t current; /* index in fam of the last sample's family, +1 (0: none yet); an index, as
			 * fam moves when it grows */
	int line;
	char *err;
	size_t errlen;
};

static int pfail(struct prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int pfail(struct prom *p, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(p->err, p->errlen, "Prometheus: line %d: ", p->line);

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < p->errlen)
		vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static int name_char(int c, int first, int colon)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':'))
		return 1;
	return !first && c >= '0' && c <= '9';
}

/* Length of a metric (colon 1) or label (colon 0) name at s; 0 if none. */
static size_t name_len(const char *s, int colon)
{
	size_t n = 0;

	while (name_char((unsigned char)s[n], n == 0, colon))
		n++;
	return n;
}

static struct family *find(struct prom *p, const char *name, size_t len, int add)
{
	for (size_t i = 0; i < p->nfam; i++)
		if (strlen(p->fam[i].name) == len && strncmp(p->fam[i].name, name, len) == 0)
			return &p->fam[i];
	if (!add || len >= sizeof(p->fam[0].name))
		return NULL;
	if (p->nfam == p->cap) {
		struct family *more = realloc(p->fam, (p->cap = p->cap ? p->cap * 2 : 64) * sizeof(*more));
		if (more == NULL)
			return NULL;
		p->fam = more;
	}
	memset(&p->fam[p->nfam], 0, sizeof(p->fam[0]));
	memcpy(p->fam[p->nfam].name, name, len);
	return &p->fam[p->nfam++];
}

static int valid_float(const char *s, size_t len)
{
	char buf[64], *end;

	if (len == 0 || len >= sizeof(buf))
		return 0;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (strcmp(buf, "+Inf") == 0 || strcmp(buf, "-Inf") == 0 || strcmp(buf, "NaN") == 0)
		return 1;
	strtod(buf, &end);
	return *end == '\0' && strpbrk(buf, "xXpP") == NULL && strcasestr(buf, "inf") == NULL &&
	       strcasestr(buf, "nan") == NULL;
}

static int comment(struct prom *p, const char *l, size_t len)
{
	int help = strncmp(l, "# HELP ", 7) == 0, type = strncmp(l, "# TYPE ", 7) == 0;
	const char *name = l + 7;
	struct family *f;
	size_t n;

	if (!help && !type)
		return 0; /* any other comment */
	n = name_len(name, 1);
	if (n == 0 || (name[n] != ' ' && (type || name + n != l + len)))
		return pfail(p, "bad metric name after # %s", help ? "HELP" : "TYPE");
	f = find(p, name, n, 1);
	if (f == NULL)
		return pfail(p, "out of memory");
	if (help) {
		if (f->help++)
			return pfail(p, "second HELP for %s", f->name);
		for (const char *c = name + n; c < l + len; c++)
			if (*c == '\\' && c + 1 < l + len && c[1] != '\\' && c[1] != 'n')
				return pfail(p, "bad escape in HELP of %s", f->name);
		return 0;
	}
	if (f->type[0] != '\0')
		return pfail(p, "second TYPE for %s", f->name);
	if (f->sampled)
		return pfail(p, "TYPE for %s after its samples", f->name);
	snprintf(f->type, sizeof(f->type), "%.*s", (int)(l + len - (name + n + 1)), name + n + 1);
	if (strcmp(f->type, "counter") && strcmp(f->type, "gauge") && strcmp(f->type, "histogram") &&
	    strcmp(f->type, "summary") && strcmp(f->type, "untyped"))
		return pfail(p, "unknown type \"%s\"", f->type);
	if (strcmp(f->type, "counter") == 0 &&
	    (strlen(f->name) < 6 || strcmp(f->name + strlen(f->name) - 6, "_total") != 0))
		return pfail(p, "counter %s does not end in _total", f->name);
	return 0;
}

/* name{label="value",...} value [timestamp] */
static int sample(struct prom *p, const char *l, size_t len)
{
	size_t n = name_len(l, 1), i;
	struct family *f;
	const char *v, *end = l + len;

	if (n == 0)
		return pfail(p, "bad metric name");
	f = find(p, l, n, 0);
	if (f == NULL || f->type[0] == '\0')
		return pfail(p, "sample of %.*s before its TYPE", (int)n, l);
	if (f->closed)
		return pfail(p, "samples of %s are not together", f->name);
	if (p->current != 0 && &p->fam[p->current - 1] != f)
		p->fam[p->current - 1].closed = 1;
	p->current = (size_t)(f - p->fam) + 1;
	f->sampled = 1;
	i = n;
	if (l[i] == '{') {
		i++;
		while (l[i] != '}') {
			size_t k = name_len(l + i, 0);
			if (k == 0 || strncmp(l + i, "__", 2) == 0 || l[i + k] != '=' || l[i + k + 1] != '"')
				return pfail(p, "bad label in %s", f->name);
			for (i += k + 2; l + i < end && l[i] != '"'; i++) {
				if (l[i] == '\\') {
					if (l[i + 1] != '\\' && l[i + 1] != '"' && l[i + 1] != 'n')
						return pfail(p, "bad escape in a label value");
					i++;
				}
			}
			if (l + i >= end)
				return pfail(p, "unterminated label value");
			i++;
			if (l[i] == ',')
				i++;
			else if (l[i] != '}')
				return pfail(p, "',' or '}' expected in the labels of %s", f->name);
		}
		i++;
	}
	if (l[i] != ' ')
		return pfail(p, "space expected before the value of %s", f->name);
	for (size_t s = 0; s < p->nseries; s++)
		if (strlen(p->series[s]) == i && strncmp(p->series[s], l, i) == 0)
			return pfail(p, "series %.*s twice", (int)i, l);
	if (p->nseries == p->series_cap) {
		char **more = realloc(p->series, (p->series_cap = p->series_cap ? p->series_cap * 2 : 256) *
							sizeof(*more));
		if (more == NULL)
			return pfail(p, "out of memory");
		p->series = more;
	}
	p->series[p->nseries++] = strndup(l, i);
	v = l + i + 1;
	n = strcspn(v, " \n");
	if (v + n > end)
		n = (size_t)(end - v);
	if (!valid_float(v, n))
		return pfail(p, "bad value \"%.*s\"", (int)n, v);
	v += n;
	if (v < end) { /* a timestamp: an integer */
		v++;
		if (v >= end || strspn(v, "-0123456789") != (size_t)(end - v))
			return pfail(p, "bad timestamp");
	}
	return 0;
}

int formatcheck_prometheus(const char *text, int *families, char *err, size_t errlen)
{
	struct prom p = { 0 };
	const char *l = text;
	int rc = 0, types = 0;

	p.err = err;
	p.errlen = errlen;
	if (*text != '\0' && text[strlen(text) - 1] != '\n') {
		p.line = 0;
		rc = pfail(&p, "the text does not end with a newline");
	}
	while (rc == 0 && *l != '\0') {
		const char *nl = strchr(l, '\n');
		size_t len = nl ? (size_t)(nl - l) : strlen(l);

		p.line++;
		if (len == 0)
			; /* empty lines are allowed */
		else if (l[0] == '#')
			rc = comment(&p, l, len);
		else
			rc = sample(&p, l, len);
		l += len + (nl != NULL);
	}
	for (size_t i = 0; i < p.nfam; i++)
		types += p.fam[i].type[0] != '\0';
	if (families)
		*families = types;
	for (size_t i = 0; i < p.nseries; i++)
		free(p.series[i]);
	free(p.series);
	free(p.fam);
	return rc;
}
