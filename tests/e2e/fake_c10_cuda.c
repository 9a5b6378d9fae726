/* fake_c10_cuda.c — an empty libc10_cuda.so: to gpupool, a process that loaded it runs PyTorch with
 * its own cache (e2e_vmm_torch). Test-only. */
int e2e_fake_c10_cuda(void);

int e2e_fake_c10_cuda(void)
{
	return 0;
}
