/* elfsym.c — elfsym.h over the program's file: its headers read onto the stack (a stripped
 * program ends there: an open, three reads and a close), the file mapped read-only only to read
 * a symbol table, and unmapped after. Every offset the file gives is checked against its size
 * before it is read. The program's place in memory comes from the kernel (AT_PHDR), and a
 * function's address is given only where its first bytes in memory are its file's. */
#define _GNU_SOURCE
#include "elfsym.h"

#include <elf.h>
#include <fcntl.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK_BYTES 16 /* bytes of a function compared between the file and memory */
#define MAX_SECTIONS 256 /* section headers read onto the stack; a program with more: not read */

struct image {
	int fd;
	const unsigned char *base; /* the file, mapped once it has a symbol table */
	size_t size;               /* bytes */
	Elf64_Ehdr eh;
	const Elf64_Phdr *ph; /* in memory (AT_PHDR), checked to be the file's */
	uintptr_t bias;       /* where the program runs against the addresses in its file */
};

/* `len` bytes at `off` of the mapped file, or NULL when they are not all in it. */
static const void *at(const struct image *f, uint64_t off, uint64_t len)
{
	return off <= f->size && len <= f->size - off ? f->base + off : NULL;
}

static int read_exact(int fd, void *buf, size_t len, uint64_t off)
{
	return pread(fd, buf, len, (off_t)off) == (ssize_t)len ? 0 : -1;
}

static int read_headers(struct image *f)
{
	Elf64_Phdr ph[64];
	const Elf64_Ehdr *eh = &f->eh;
	uintptr_t at_phdr = (uintptr_t)getauxval(AT_PHDR);

	if (read_exact(f->fd, &f->eh, sizeof(f->eh), 0) != 0 ||
	    memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_phentsize != sizeof(Elf64_Phdr) ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_phnum > 64 || at_phdr == 0 ||
	    getauxval(AT_PHNUM) != eh->e_phnum ||
	    read_exact(f->fd, ph, eh->e_phnum * sizeof(Elf64_Phdr), eh->e_phoff) != 0)
		return -1;
	/* The file is the program the kernel loaded (not a script's path, not ld.so run by hand):
	 * the same program headers, where the kernel put them. */
	f->ph = (const Elf64_Phdr *)at_phdr;
	if (memcmp(f->ph, ph, eh->e_phnum * sizeof(Elf64_Phdr)) != 0)
		return -1;
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		const Elf64_Phdr *p = &f->ph[i];

		if (p->p_type == PT_LOAD && p->p_offset <= eh->e_phoff &&
		    eh->e_phoff - p->p_offset < p->p_filesz) {
			f->bias = at_phdr - (uintptr_t)(p->p_vaddr + (eh->e_phoff - p->p_offset));
			return 0;
		}
	}
	return -1;
}

/* Where a function of the file runs: in an executable segment, with its file's bytes there. */
static void *in_memory(const struct image *f, const Elf64_Sym *s)
{
	for (unsigned i = 0; i < f->eh.e_phnum; i++) {
		const Elf64_Phdr *p = &f->ph[i];
		const void *file;
		void *mem;

		if (p->p_type != PT_LOAD || !(p->p_flags & PF_X) || s->st_value < p->p_vaddr ||
		    s->st_value - p->p_vaddr > p->p_filesz ||
		    p->p_filesz - (s->st_value - p->p_vaddr) < CHECK_BYTES)
			continue;
		file = at(f, p->p_offset + (s->st_value - p->p_vaddr), CHECK_BYTES);
		mem = (void *)(f->bias + (uintptr_t)s->st_value);
		return file != NULL && memcmp(file, mem, CHECK_BYTES) == 0 ? mem : NULL;
	}
	return NULL;
}

/* Two definitions of one name leave it unfound: which one the program calls is not known. */
static void match(const struct image *f, const Elf64_Sym *s, const char *name,
		  struct gp_elf_fn *fns, size_t n, const Elf64_Sym **seen)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(name, fns[i].name) != 0)
			continue;
		if (seen[i] == NULL) {
			seen[i] = s;
			fns[i].addr = in_memory(f, s);
			fns[i].size = (size_t)s->st_size;
		} else if (seen[i]->st_value != s->st_value) {
			fns[i].addr = NULL;
		}
	}
}

/* Whether a name begins with one of the marks. */
static int marked_by(const char *name, const char *const *marks)
{
	for (; *marks != NULL; marks++)
		if (strncmp(name, *marks, strlen(*marks)) == 0)
			return 1;
	return 0;
}

/* The symbol table's functions; the file is mapped for it (and unmapped by the caller). */
static int scan_symbols(struct image *f, const Elf64_Shdr *sym, const Elf64_Shdr *strs,
			struct gp_elf_fn *fns, size_t n, const char *const *marks, int *marked)
{
	const Elf64_Sym *seen[8] = { NULL };
	const Elf64_Sym *syms;
	const char *str;
	uint64_t nsym = sym->sh_size / sizeof(Elf64_Sym), strsize = strs->sh_size;
	struct stat st;
	void *map;

	if (n > sizeof(seen) / sizeof(seen[0]) || fstat(f->fd, &st) != 0 || st.st_size <= 0)
		return -1;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, f->fd, 0);
	if (map == MAP_FAILED)
		return -1;
	f->base = map;
	f->size = (size_t)st.st_size;
	syms = at(f, sym->sh_offset, nsym * sizeof(Elf64_Sym));
	str = at(f, strs->sh_offset, strsize);
	if (syms == NULL || str == NULL || strsize == 0 || str[strsize - 1] != '\0')
		return -1;
	for (uint64_t k = 0; k < nsym; k++) {
		const char *name = syms[k].st_name < strsize ? str + syms[k].st_name : "";

		if (!*marked && marked_by(name, marks))
			*marked = 1;
		if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC && syms[k].st_shndx != SHN_UNDEF &&
		    syms[k].st_value != 0)
			match(f, &syms[k], name, fns, n, seen);
	}
	return 0;
}

/* The section headers, read onto the stack: a stripped program ends here, nothing mapped. */
static int scan(struct image *f, struct gp_elf_fn *fns, size_t n, const char *const *marks,
		int *marked)
{
	Elf64_Shdr sh[MAX_SECTIONS];
	unsigned nsh = f->eh.e_shnum;

	if (nsh == 0 || nsh > MAX_SECTIONS ||
	    read_exact(f->fd, sh, nsh * sizeof(Elf64_Shdr), f->eh.e_shoff) != 0)
		return -1;
	for (unsigned i = 0; i < nsh; i++)
		if (sh[i].sh_type == SHT_SYMTAB && sh[i].sh_link < nsh)
			return scan_symbols(f, &sh[i], &sh[sh[i].sh_link], fns, n, marks, marked);
	return -1; /* stripped */
}

/* The main program's dynamic string table in memory, from its program headers (AT_PHDR): NULL
 * when something is not as expected (the caller then reads the file). */
static const char *dynamic_strings(size_t *len)
{
	const Elf64_Phdr *ph = (const Elf64_Phdr *)getauxval(AT_PHDR);
	size_t n = (size_t)getauxval(AT_PHNUM);
	uintptr_t bias = 0, lo = UINTPTR_MAX, hi = 0, str = 0;
	const Elf64_Dyn *dyn = NULL;
	int have_bias = 0;

	if (ph == NULL || n == 0)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (ph[i].p_type == PT_PHDR) {
			bias = (uintptr_t)ph - (uintptr_t)ph[i].p_vaddr;
			have_bias = 1;
		}
	if (!have_bias)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (ph[i].p_type == PT_DYNAMIC)
			dyn = (const Elf64_Dyn *)(bias + (uintptr_t)ph[i].p_vaddr);
		if (ph[i].p_type == PT_LOAD) {
			lo = bias + ph[i].p_vaddr < lo ? bias + ph[i].p_vaddr : lo;
			hi = bias + ph[i].p_vaddr + ph[i].p_memsz > hi ?
				     bias + ph[i].p_vaddr + ph[i].p_memsz : hi;
		}
	}
	*len = 0;
	for (; dyn != NULL && dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_STRTAB)
			str = (uintptr_t)dyn->d_un.d_ptr;
		else if (dyn->d_tag == DT_STRSZ)
			*len = (size_t)dyn->d_un.d_val;
	}
	if (str != 0 && str < lo)
		str += bias; /* the loader did not relocate the entry in place */
	if (str < lo || *len == 0 || str + *len > hi)
		return NULL;
	return (const char *)str;
}

int gp_elf_main_may_import(const char *name)
{
	size_t len, nlen = strlen(name);
	const char *s = dynamic_strings(&len);

	if (s == NULL)
		return 1;
	for (size_t i = 0; i + nlen < len; i++)
		if ((i == 0 || s[i - 1] == '\0') && memcmp(s + i, name, nlen + 1) == 0)
			return 1;
	return 0;
}

/* The program's file: by the path it was run with (AT_EXECFN: a plain lookup), else through
 * /proc/self/exe (a script's path names the script, not the program). */
static int open_program(struct image *f)
{
	const char *paths[] = { (const char *)getauxval(AT_EXECFN), "/proc/self/exe" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		if (paths[i] == NULL || (f->fd = open(paths[i], O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		if (read_headers(f) == 0)
			return 0;
		close(f->fd);
	}
	f->fd = -1;
	return -1;
}

int gp_elf_main_functions(struct gp_elf_fn *fns, size_t n, const char *const *marks,
			  int *marked)
{
	struct image f = { .fd = -1 };
	int rc;

	*marked = 0;
	for (size_t i = 0; i < n; i++) {
		fns[i].addr = NULL;
		fns[i].size = 0;
	}
	if (open_program(&f) != 0)
		return -1;
	rc = scan(&f, fns, n, marks, marked);
	if (f.base != NULL)
		munmap((void *)f.base, f.size);
	close(f.fd);
	return rc;
}
