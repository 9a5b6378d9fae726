/* elfsym.c — elfsym.h over the program's file, mapped read-only for the look-up and unmapped
 * after: five system calls, and a page fault for each page of the symbol tables read (a
 * stripped program's file has none to read). Every offset the file gives is checked against
 * its size before it is read. The program's place in memory comes from the kernel (AT_PHDR),
 * and a function's address is given only where its first bytes in memory are its file's. */
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

struct image {
	const unsigned char *base;
	size_t size; /* bytes */
	const Elf64_Ehdr *eh;
	const Elf64_Phdr *ph;
	uintptr_t bias; /* where the program runs against the addresses in its file */
};

/* `len` bytes at `off` of the file, or NULL when they are not all in it. */
static const void *at(const struct image *f, uint64_t off, uint64_t len)
{
	return off <= f->size && len <= f->size - off ? f->base + off : NULL;
}

static int read_headers(struct image *f)
{
	const Elf64_Ehdr *eh = at(f, 0, sizeof(*eh));
	uintptr_t at_phdr = (uintptr_t)getauxval(AT_PHDR);

	if (eh == NULL || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_shentsize != sizeof(Elf64_Shdr) ||
	    at_phdr == 0)
		return -1;
	f->eh = eh;
	f->ph = at(f, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr));
	/* The file the kernel names is the program it loaded (not ld.so run by hand, say): the same
	 * program headers, where the kernel put them. */
	if (f->ph == NULL || getauxval(AT_PHNUM) != eh->e_phnum ||
	    memcmp((const void *)at_phdr, f->ph, (size_t)eh->e_phnum * sizeof(Elf64_Phdr)) != 0)
		return -1;
	/* The program headers lie in a loaded segment; the kernel says where they are now. */
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
	for (unsigned i = 0; i < f->eh->e_phnum; i++) {
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

static int scan(const struct image *f, struct gp_elf_fn *fns, size_t n,
		const char *const *marks, int *marked)
{
	const Elf64_Shdr *sh = at(f, f->eh->e_shoff, (uint64_t)f->eh->e_shnum * sizeof(*sh));
	const Elf64_Sym *seen[8] = { NULL };

	if (sh == NULL || n > sizeof(seen) / sizeof(seen[0]))
		return -1;
	for (unsigned i = 0; i < f->eh->e_shnum; i++) {
		const Elf64_Sym *syms;
		const char *str;
		uint64_t nsym, strsize;

		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= f->eh->e_shnum)
			continue;
		nsym = sh[i].sh_size / sizeof(Elf64_Sym);
		strsize = sh[sh[i].sh_link].sh_size;
		syms = at(f, sh[i].sh_offset, nsym * sizeof(Elf64_Sym));
		str = at(f, sh[sh[i].sh_link].sh_offset, strsize);
		if (syms == NULL || str == NULL || strsize == 0 || str[strsize - 1] != '\0')
			return -1;
		for (uint64_t k = 0; k < nsym; k++) {
			const char *name = syms[k].st_name < strsize ? str + syms[k].st_name : "";

			if (!*marked && marked_by(name, marks))
				*marked = 1;
			if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC &&
			    syms[k].st_shndx != SHN_UNDEF && syms[k].st_value != 0)
				match(f, &syms[k], name, fns, n, seen);
		}
		return 0;
	}
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

int gp_elf_main_functions(struct gp_elf_fn *fns, size_t n, const char *const *marks,
			  int *marked)
{
	struct image f = { 0 };
	struct stat st;
	void *map;
	int fd, rc = -1;

	*marked = 0;
	for (size_t i = 0; i < n; i++) {
		fns[i].addr = NULL;
		fns[i].size = 0;
	}
	fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr))
		goto out;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		goto out;
	f.base = map;
	f.size = (size_t)st.st_size;
	if (read_headers(&f) == 0)
		rc = scan(&f, fns, n, marks, marked);
	munmap(map, f.size);
out:
	close(fd);
	return rc;
}
