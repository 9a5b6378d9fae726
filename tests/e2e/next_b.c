/* next_b.c — the next definition of e2e_next_sym, loaded after next_a (for e2e_dlsym). */
char e2e_next_sym(void)
{
	return 'b';
}
