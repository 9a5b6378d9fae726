/* driver_graph.c — the stand-in driver's graphs: handles without nodes. Capture, creation,
 * cloning, instantiation, child nodes, exec updates and launches give or take handles and record
 * nothing (no kernels run here), so that a shim tracking graph lifetimes can be tested.
 * Test-only. */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

/* Nodes are not simulated: every node is this one. */
static struct CUgraphNode_st {
	int unused;
} the_node;

/* A graph object of `device`; CUDA_ERROR_OUT_OF_MEMORY if none. */
CUresult new_graph(CUgraph *out, int device)
{
	*out = calloc(1, sizeof(**out));
	if (*out == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	(*out)->device = device;
	return CUDA_SUCCESS;
}

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	CUresult rc = check_call();
	int dev = ctx_device();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (dev < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (phGraph == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	return new_graph(phGraph, dev);
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (hGraph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	free(hGraph);
	return CUDA_SUCCESS;
}

CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (phGraphClone == NULL || originalGraph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return new_graph(phGraphClone, originalGraph->device);
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
				  const CUgraphNode *dependencies, size_t numDependencies,
				  CUgraph childGraph)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (phGraphNode == NULL || hGraph == NULL || childGraph == NULL ||
	    (numDependencies > 0 && dependencies == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	*phGraphNode = &the_node;
	return CUDA_SUCCESS;
}

/* ---- executable graphs ---- */

static CUresult instantiate(CUgraphExec *exec, CUgraph graph)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (exec == NULL || graph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*exec = calloc(1, sizeof(**exec));
	if (*exec == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	(*exec)->device = graph->device;
	return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
				     unsigned long long flags)
{
	(void)flags;
	return instantiate(phGraphExec, hGraph);
}

static CUresult instantiate_with_params(CUgraphExec *exec, CUgraph graph,
				       CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	CUresult rc;

	if (params == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = instantiate(exec, graph);
	params->hErrNode_out = NULL;
	params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
						: CUDA_GRAPH_INSTANTIATE_ERROR;
	return rc;
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
				      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_with_params(phGraphExec, hGraph, instantiateParams);
}

/* The upload stream is not used: nothing is uploaded here. */
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
					   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_with_params(phGraphExec, hGraph, instantiateParams);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (hGraphExec == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	free(hGraphExec);
	return CUDA_SUCCESS;
}

CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					    CUgraph childGraph)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (hGraphExec == NULL || hNode == NULL || childGraph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
			      CUgraphExecUpdateResultInfo *resultInfo)
{
	CUresult rc = check_call();

	if (rc != CUDA_SUCCESS)
		return rc;
	if (hGraphExec == NULL || hGraph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (resultInfo != NULL)
		memset(resultInfo, 0, sizeof(*resultInfo)); /* CU_GRAPH_EXEC_UPDATE_SUCCESS */
	return CUDA_SUCCESS;
}

/* Nothing runs; the launch is checked as any work queued on the stream. */
static CUresult graph_launch(CUgraphExec exec, CUstream s)
{
	CUresult rc;
	int dev, run;

	rc = enter_stream(s, &dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (exec == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		rc = stream_work("cuGraphLaunch", s, &dev, &run);
	leave();
	return rc;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return graph_launch(hGraphExec, hStream != NULL ? hStream : CU_STREAM_PER_THREAD);
}
