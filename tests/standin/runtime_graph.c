/* runtime_graph.c — the stand-in runtime's graph entry points, each over its driver function
 * (graphs are handles without nodes in the stand-in driver: see standin.h). */
#include "runtime.h"

#include <string.h>

cudaError_t cudaGraphCreate(cudaGraph_t *graph, unsigned int flags)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphCreate(graph, flags));
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphDestroy(graph));
}

cudaError_t cudaGraphClone(cudaGraph_t *clone, cudaGraph_t graph)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphClone(clone, graph));
}

cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *node, cudaGraph_t graph,
				       const cudaGraphNode_t *deps, size_t ndeps, cudaGraph_t child)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphAddChildGraphNode(node, graph, deps, ndeps, child));
}

static cudaError_t instantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphInstantiateWithFlags(exec, graph, flags));
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
	return instantiate(exec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
					  unsigned long long flags)
{
	return instantiate(exec, graph, flags);
}

_Static_assert((int)cudaGraphInstantiateSuccess == (int)CUDA_GRAPH_INSTANTIATE_SUCCESS, "");

cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *exec, cudaGraph_t graph,
					   cudaGraphInstantiateParams *params)
{
	CUDA_GRAPH_INSTANTIATE_PARAMS p = { 0 };
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	if (params == NULL)
		return result(cudaErrorInvalidValue);
	p.flags = params->flags;
	p.hUploadStream = params->uploadStream;
	rc = cu_result(drv.GraphInstantiateWithParams(exec, graph, &p));
	params->errNode_out = p.hErrNode_out;
	params->result_out = (cudaGraphInstantiateResult)p.result_out;
	return rc;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphExecDestroy(exec));
}

cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
						 cudaGraph_t child)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphExecChildGraphNodeSetParams(exec, node, child));
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
				cudaGraphExecUpdateResultInfo *info)
{
	CUgraphExecUpdateResultInfo r;
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	memset(&r, 0, sizeof(r));
	rc = cu_result(drv.GraphExecUpdate(exec, graph, &r));
	if (info != NULL) {
		info->result = (enum cudaGraphExecUpdateResult)r.result;
		info->errorNode = r.errorNode;
		info->errorFromNode = r.errorFromNode;
	}
	return rc;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphLaunch(exec, stream));
}

cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream)
{
	cudaError_t rc = use_device();

	if (rc != cudaSuccess)
		return result(rc);
	return cu_result(drv.GraphLaunch_ptsz(exec, stream));
}
