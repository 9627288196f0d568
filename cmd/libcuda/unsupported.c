// Every other entry point cuda.h (CUDA 12.4) declares, under the names its
// #defines make programs link (and the plain names older programs link):
// each answers CUDA_ERROR_NOT_SUPPORTED and is logged once. Made from the
// header's declarations; a stub takes no arguments, which the x86-64 System
// V calling convention lets any caller call whatever it passes.
#include "_cgo_export.h"

#define UNSUPPORTED(name) \
	CUresult name(void) { return gmigUnsupported((char *)#name); }
UNSUPPORTED(cuArray3DCreate)
UNSUPPORTED(cuArray3DCreate_v2)
UNSUPPORTED(cuArray3DGetDescriptor)
UNSUPPORTED(cuArray3DGetDescriptor_v2)
UNSUPPORTED(cuArrayCreate)
UNSUPPORTED(cuArrayCreate_v2)
UNSUPPORTED(cuArrayDestroy)
UNSUPPORTED(cuArrayGetDescriptor)
UNSUPPORTED(cuArrayGetDescriptor_v2)
UNSUPPORTED(cuArrayGetMemoryRequirements)
UNSUPPORTED(cuArrayGetPlane)
UNSUPPORTED(cuArrayGetSparseProperties)
UNSUPPORTED(cuCoredumpGetAttribute)
UNSUPPORTED(cuCoredumpGetAttributeGlobal)
UNSUPPORTED(cuCoredumpSetAttribute)
UNSUPPORTED(cuCoredumpSetAttributeGlobal)
UNSUPPORTED(cuCtxAttach)
UNSUPPORTED(cuCtxCreate)
UNSUPPORTED(cuCtxCreate_v3)
UNSUPPORTED(cuCtxDestroy)
UNSUPPORTED(cuCtxDetach)
UNSUPPORTED(cuCtxDisablePeerAccess)
UNSUPPORTED(cuCtxEnablePeerAccess)
UNSUPPORTED(cuCtxFromGreenCtx)
UNSUPPORTED(cuCtxGetApiVersion)
UNSUPPORTED(cuCtxGetCacheConfig)
UNSUPPORTED(cuCtxGetDevResource)
UNSUPPORTED(cuCtxGetExecAffinity)
UNSUPPORTED(cuCtxGetFlags)
UNSUPPORTED(cuCtxGetId)
UNSUPPORTED(cuCtxGetLimit)
UNSUPPORTED(cuCtxGetSharedMemConfig)
UNSUPPORTED(cuCtxGetStreamPriorityRange)
UNSUPPORTED(cuCtxPopCurrent)
UNSUPPORTED(cuCtxPushCurrent)
UNSUPPORTED(cuCtxResetPersistingL2Cache)
UNSUPPORTED(cuCtxSetCacheConfig)
UNSUPPORTED(cuCtxSetFlags)
UNSUPPORTED(cuCtxSetLimit)
UNSUPPORTED(cuCtxSetSharedMemConfig)
UNSUPPORTED(cuDestroyExternalMemory)
UNSUPPORTED(cuDestroyExternalSemaphore)
UNSUPPORTED(cuDevResourceGenerateDesc)
UNSUPPORTED(cuDevSmResourceSplitByCount)
UNSUPPORTED(cuDeviceCanAccessPeer)
UNSUPPORTED(cuDeviceGetByPCIBusId)
UNSUPPORTED(cuDeviceGetDefaultMemPool)
UNSUPPORTED(cuDeviceGetDevResource)
UNSUPPORTED(cuDeviceGetExecAffinitySupport)
UNSUPPORTED(cuDeviceGetGraphMemAttribute)
UNSUPPORTED(cuDeviceGetLuid)
UNSUPPORTED(cuDeviceGetMemPool)
UNSUPPORTED(cuDeviceGetNvSciSyncAttributes)
UNSUPPORTED(cuDeviceGetP2PAttribute)
UNSUPPORTED(cuDeviceGetPCIBusId)
UNSUPPORTED(cuDeviceGetProperties)
UNSUPPORTED(cuDeviceGetTexture1DLinearMaxWidth)
UNSUPPORTED(cuDeviceGraphMemTrim)
UNSUPPORTED(cuDevicePrimaryCtxRelease)
UNSUPPORTED(cuDevicePrimaryCtxReset)
UNSUPPORTED(cuDevicePrimaryCtxSetFlags)
UNSUPPORTED(cuDeviceRegisterAsyncNotification)
UNSUPPORTED(cuDeviceSetGraphMemAttribute)
UNSUPPORTED(cuDeviceSetMemPool)
UNSUPPORTED(cuDeviceTotalMem)
UNSUPPORTED(cuDeviceUnregisterAsyncNotification)
UNSUPPORTED(cuEventDestroy)
UNSUPPORTED(cuEventRecordWithFlags)
UNSUPPORTED(cuExternalMemoryGetMappedBuffer)
UNSUPPORTED(cuExternalMemoryGetMappedMipmappedArray)
UNSUPPORTED(cuFlushGPUDirectRDMAWrites)
UNSUPPORTED(cuFuncGetAttribute)
UNSUPPORTED(cuFuncGetModule)
UNSUPPORTED(cuFuncGetName)
UNSUPPORTED(cuFuncGetParamInfo)
UNSUPPORTED(cuFuncIsLoaded)
UNSUPPORTED(cuFuncLoad)
UNSUPPORTED(cuFuncSetAttribute)
UNSUPPORTED(cuFuncSetBlockShape)
UNSUPPORTED(cuFuncSetCacheConfig)
UNSUPPORTED(cuFuncSetSharedMemConfig)
UNSUPPORTED(cuFuncSetSharedSize)
UNSUPPORTED(cuGetExportTable)
UNSUPPORTED(cuGraphAddBatchMemOpNode)
UNSUPPORTED(cuGraphAddChildGraphNode)
UNSUPPORTED(cuGraphAddDependencies)
UNSUPPORTED(cuGraphAddDependencies_v2)
UNSUPPORTED(cuGraphAddEmptyNode)
UNSUPPORTED(cuGraphAddEventRecordNode)
UNSUPPORTED(cuGraphAddEventWaitNode)
UNSUPPORTED(cuGraphAddExternalSemaphoresSignalNode)
UNSUPPORTED(cuGraphAddExternalSemaphoresWaitNode)
UNSUPPORTED(cuGraphAddHostNode)
UNSUPPORTED(cuGraphAddKernelNode)
UNSUPPORTED(cuGraphAddKernelNode_v2)
UNSUPPORTED(cuGraphAddMemAllocNode)
UNSUPPORTED(cuGraphAddMemFreeNode)
UNSUPPORTED(cuGraphAddMemcpyNode)
UNSUPPORTED(cuGraphAddMemsetNode)
UNSUPPORTED(cuGraphAddNode)
UNSUPPORTED(cuGraphAddNode_v2)
UNSUPPORTED(cuGraphBatchMemOpNodeGetParams)
UNSUPPORTED(cuGraphBatchMemOpNodeSetParams)
UNSUPPORTED(cuGraphChildGraphNodeGetGraph)
UNSUPPORTED(cuGraphClone)
UNSUPPORTED(cuGraphConditionalHandleCreate)
UNSUPPORTED(cuGraphCreate)
UNSUPPORTED(cuGraphDebugDotPrint)
UNSUPPORTED(cuGraphDestroy)
UNSUPPORTED(cuGraphDestroyNode)
UNSUPPORTED(cuGraphEventRecordNodeGetEvent)
UNSUPPORTED(cuGraphEventRecordNodeSetEvent)
UNSUPPORTED(cuGraphEventWaitNodeGetEvent)
UNSUPPORTED(cuGraphEventWaitNodeSetEvent)
UNSUPPORTED(cuGraphExecBatchMemOpNodeSetParams)
UNSUPPORTED(cuGraphExecChildGraphNodeSetParams)
UNSUPPORTED(cuGraphExecDestroy)
UNSUPPORTED(cuGraphExecEventRecordNodeSetEvent)
UNSUPPORTED(cuGraphExecEventWaitNodeSetEvent)
UNSUPPORTED(cuGraphExecExternalSemaphoresSignalNodeSetParams)
UNSUPPORTED(cuGraphExecExternalSemaphoresWaitNodeSetParams)
UNSUPPORTED(cuGraphExecGetFlags)
UNSUPPORTED(cuGraphExecHostNodeSetParams)
UNSUPPORTED(cuGraphExecKernelNodeSetParams)
UNSUPPORTED(cuGraphExecKernelNodeSetParams_v2)
UNSUPPORTED(cuGraphExecMemcpyNodeSetParams)
UNSUPPORTED(cuGraphExecMemsetNodeSetParams)
UNSUPPORTED(cuGraphExecNodeSetParams)
UNSUPPORTED(cuGraphExecUpdate)
UNSUPPORTED(cuGraphExecUpdate_v2)
UNSUPPORTED(cuGraphExternalSemaphoresSignalNodeGetParams)
UNSUPPORTED(cuGraphExternalSemaphoresSignalNodeSetParams)
UNSUPPORTED(cuGraphExternalSemaphoresWaitNodeGetParams)
UNSUPPORTED(cuGraphExternalSemaphoresWaitNodeSetParams)
UNSUPPORTED(cuGraphGetEdges)
UNSUPPORTED(cuGraphGetEdges_v2)
UNSUPPORTED(cuGraphGetNodes)
UNSUPPORTED(cuGraphGetRootNodes)
UNSUPPORTED(cuGraphHostNodeGetParams)
UNSUPPORTED(cuGraphHostNodeSetParams)
UNSUPPORTED(cuGraphInstantiate)
UNSUPPORTED(cuGraphInstantiateWithFlags)
UNSUPPORTED(cuGraphInstantiateWithParams)
UNSUPPORTED(cuGraphInstantiate_v2)
UNSUPPORTED(cuGraphKernelNodeCopyAttributes)
UNSUPPORTED(cuGraphKernelNodeGetAttribute)
UNSUPPORTED(cuGraphKernelNodeGetParams)
UNSUPPORTED(cuGraphKernelNodeGetParams_v2)
UNSUPPORTED(cuGraphKernelNodeSetAttribute)
UNSUPPORTED(cuGraphKernelNodeSetParams)
UNSUPPORTED(cuGraphKernelNodeSetParams_v2)
UNSUPPORTED(cuGraphLaunch)
UNSUPPORTED(cuGraphMemAllocNodeGetParams)
UNSUPPORTED(cuGraphMemFreeNodeGetParams)
UNSUPPORTED(cuGraphMemcpyNodeGetParams)
UNSUPPORTED(cuGraphMemcpyNodeSetParams)
UNSUPPORTED(cuGraphMemsetNodeGetParams)
UNSUPPORTED(cuGraphMemsetNodeSetParams)
UNSUPPORTED(cuGraphNodeFindInClone)
UNSUPPORTED(cuGraphNodeGetDependencies)
UNSUPPORTED(cuGraphNodeGetDependencies_v2)
UNSUPPORTED(cuGraphNodeGetDependentNodes)
UNSUPPORTED(cuGraphNodeGetDependentNodes_v2)
UNSUPPORTED(cuGraphNodeGetEnabled)
UNSUPPORTED(cuGraphNodeGetType)
UNSUPPORTED(cuGraphNodeSetEnabled)
UNSUPPORTED(cuGraphNodeSetParams)
UNSUPPORTED(cuGraphReleaseUserObject)
UNSUPPORTED(cuGraphRemoveDependencies)
UNSUPPORTED(cuGraphRemoveDependencies_v2)
UNSUPPORTED(cuGraphRetainUserObject)
UNSUPPORTED(cuGraphUpload)
UNSUPPORTED(cuGraphicsMapResources)
UNSUPPORTED(cuGraphicsResourceGetMappedMipmappedArray)
UNSUPPORTED(cuGraphicsResourceGetMappedPointer)
UNSUPPORTED(cuGraphicsResourceGetMappedPointer_v2)
UNSUPPORTED(cuGraphicsResourceSetMapFlags)
UNSUPPORTED(cuGraphicsResourceSetMapFlags_v2)
UNSUPPORTED(cuGraphicsSubResourceGetMappedArray)
UNSUPPORTED(cuGraphicsUnmapResources)
UNSUPPORTED(cuGraphicsUnregisterResource)
UNSUPPORTED(cuGreenCtxCreate)
UNSUPPORTED(cuGreenCtxDestroy)
UNSUPPORTED(cuGreenCtxGetDevResource)
UNSUPPORTED(cuGreenCtxRecordEvent)
UNSUPPORTED(cuGreenCtxWaitEvent)
UNSUPPORTED(cuImportExternalMemory)
UNSUPPORTED(cuImportExternalSemaphore)
UNSUPPORTED(cuIpcCloseMemHandle)
UNSUPPORTED(cuIpcGetEventHandle)
UNSUPPORTED(cuIpcGetMemHandle)
UNSUPPORTED(cuIpcOpenEventHandle)
UNSUPPORTED(cuIpcOpenMemHandle)
UNSUPPORTED(cuIpcOpenMemHandle_v2)
UNSUPPORTED(cuKernelGetAttribute)
UNSUPPORTED(cuKernelGetFunction)
UNSUPPORTED(cuKernelGetName)
UNSUPPORTED(cuKernelGetParamInfo)
UNSUPPORTED(cuKernelSetAttribute)
UNSUPPORTED(cuKernelSetCacheConfig)
UNSUPPORTED(cuLaunch)
UNSUPPORTED(cuLaunchCooperativeKernel)
UNSUPPORTED(cuLaunchCooperativeKernelMultiDevice)
UNSUPPORTED(cuLaunchGrid)
UNSUPPORTED(cuLaunchGridAsync)
UNSUPPORTED(cuLaunchHostFunc)
UNSUPPORTED(cuLaunchKernelEx)
UNSUPPORTED(cuLibraryEnumerateKernels)
UNSUPPORTED(cuLibraryGetGlobal)
UNSUPPORTED(cuLibraryGetKernel)
UNSUPPORTED(cuLibraryGetKernelCount)
UNSUPPORTED(cuLibraryGetManaged)
UNSUPPORTED(cuLibraryGetModule)
UNSUPPORTED(cuLibraryGetUnifiedFunction)
UNSUPPORTED(cuLibraryLoadData)
UNSUPPORTED(cuLibraryLoadFromFile)
UNSUPPORTED(cuLibraryUnload)
UNSUPPORTED(cuLinkAddData)
UNSUPPORTED(cuLinkAddData_v2)
UNSUPPORTED(cuLinkAddFile)
UNSUPPORTED(cuLinkAddFile_v2)
UNSUPPORTED(cuLinkCreate)
UNSUPPORTED(cuLinkCreate_v2)
UNSUPPORTED(cuMemAddressFree)
UNSUPPORTED(cuMemAddressReserve)
UNSUPPORTED(cuMemAdvise)
UNSUPPORTED(cuMemAdvise_v2)
UNSUPPORTED(cuMemAlloc)
UNSUPPORTED(cuMemAllocAsync)
UNSUPPORTED(cuMemAllocFromPoolAsync)
UNSUPPORTED(cuMemAllocHost)
UNSUPPORTED(cuMemAllocHost_v2)
UNSUPPORTED(cuMemAllocManaged)
UNSUPPORTED(cuMemAllocPitch)
UNSUPPORTED(cuMemAllocPitch_v2)
UNSUPPORTED(cuMemCreate)
UNSUPPORTED(cuMemExportToShareableHandle)
UNSUPPORTED(cuMemFree)
UNSUPPORTED(cuMemFreeAsync)
UNSUPPORTED(cuMemFreeHost)
UNSUPPORTED(cuMemGetAccess)
UNSUPPORTED(cuMemGetAddressRange)
UNSUPPORTED(cuMemGetAllocationGranularity)
UNSUPPORTED(cuMemGetAllocationPropertiesFromHandle)
UNSUPPORTED(cuMemGetHandleForAddressRange)
UNSUPPORTED(cuMemGetInfo)
UNSUPPORTED(cuMemHostAlloc)
UNSUPPORTED(cuMemHostGetDevicePointer)
UNSUPPORTED(cuMemHostGetDevicePointer_v2)
UNSUPPORTED(cuMemHostGetFlags)
UNSUPPORTED(cuMemHostRegister)
UNSUPPORTED(cuMemHostRegister_v2)
UNSUPPORTED(cuMemHostUnregister)
UNSUPPORTED(cuMemImportFromShareableHandle)
UNSUPPORTED(cuMemMap)
UNSUPPORTED(cuMemMapArrayAsync)
UNSUPPORTED(cuMemPoolCreate)
UNSUPPORTED(cuMemPoolDestroy)
UNSUPPORTED(cuMemPoolExportPointer)
UNSUPPORTED(cuMemPoolExportToShareableHandle)
UNSUPPORTED(cuMemPoolGetAccess)
UNSUPPORTED(cuMemPoolGetAttribute)
UNSUPPORTED(cuMemPoolImportFromShareableHandle)
UNSUPPORTED(cuMemPoolImportPointer)
UNSUPPORTED(cuMemPoolSetAccess)
UNSUPPORTED(cuMemPoolSetAttribute)
UNSUPPORTED(cuMemPoolTrimTo)
UNSUPPORTED(cuMemPrefetchAsync)
UNSUPPORTED(cuMemPrefetchAsync_v2)
UNSUPPORTED(cuMemRangeGetAttribute)
UNSUPPORTED(cuMemRangeGetAttributes)
UNSUPPORTED(cuMemRelease)
UNSUPPORTED(cuMemRetainAllocationHandle)
UNSUPPORTED(cuMemSetAccess)
UNSUPPORTED(cuMemUnmap)
UNSUPPORTED(cuMemcpy)
UNSUPPORTED(cuMemcpy2D)
UNSUPPORTED(cuMemcpy2DAsync)
UNSUPPORTED(cuMemcpy2DAsync_v2)
UNSUPPORTED(cuMemcpy2DUnaligned)
UNSUPPORTED(cuMemcpy2DUnaligned_v2)
UNSUPPORTED(cuMemcpy2D_v2)
UNSUPPORTED(cuMemcpy3D)
UNSUPPORTED(cuMemcpy3DAsync)
UNSUPPORTED(cuMemcpy3DAsync_v2)
UNSUPPORTED(cuMemcpy3DPeer)
UNSUPPORTED(cuMemcpy3DPeerAsync)
UNSUPPORTED(cuMemcpy3D_v2)
UNSUPPORTED(cuMemcpyAsync)
UNSUPPORTED(cuMemcpyAtoA)
UNSUPPORTED(cuMemcpyAtoA_v2)
UNSUPPORTED(cuMemcpyAtoD)
UNSUPPORTED(cuMemcpyAtoD_v2)
UNSUPPORTED(cuMemcpyAtoH)
UNSUPPORTED(cuMemcpyAtoHAsync)
UNSUPPORTED(cuMemcpyAtoHAsync_v2)
UNSUPPORTED(cuMemcpyAtoH_v2)
UNSUPPORTED(cuMemcpyDtoA)
UNSUPPORTED(cuMemcpyDtoA_v2)
UNSUPPORTED(cuMemcpyDtoD)
UNSUPPORTED(cuMemcpyDtoDAsync)
UNSUPPORTED(cuMemcpyDtoH)
UNSUPPORTED(cuMemcpyDtoHAsync)
UNSUPPORTED(cuMemcpyHtoA)
UNSUPPORTED(cuMemcpyHtoAAsync)
UNSUPPORTED(cuMemcpyHtoAAsync_v2)
UNSUPPORTED(cuMemcpyHtoA_v2)
UNSUPPORTED(cuMemcpyHtoD)
UNSUPPORTED(cuMemcpyHtoDAsync)
UNSUPPORTED(cuMemcpyPeer)
UNSUPPORTED(cuMemcpyPeerAsync)
UNSUPPORTED(cuMemsetD16)
UNSUPPORTED(cuMemsetD2D16)
UNSUPPORTED(cuMemsetD2D16Async)
UNSUPPORTED(cuMemsetD2D16_v2)
UNSUPPORTED(cuMemsetD2D32)
UNSUPPORTED(cuMemsetD2D32Async)
UNSUPPORTED(cuMemsetD2D32_v2)
UNSUPPORTED(cuMemsetD2D8)
UNSUPPORTED(cuMemsetD2D8Async)
UNSUPPORTED(cuMemsetD2D8_v2)
UNSUPPORTED(cuMemsetD32)
UNSUPPORTED(cuMemsetD8)
UNSUPPORTED(cuMipmappedArrayCreate)
UNSUPPORTED(cuMipmappedArrayDestroy)
UNSUPPORTED(cuMipmappedArrayGetLevel)
UNSUPPORTED(cuMipmappedArrayGetMemoryRequirements)
UNSUPPORTED(cuMipmappedArrayGetSparseProperties)
UNSUPPORTED(cuModuleEnumerateFunctions)
UNSUPPORTED(cuModuleGetFunctionCount)
UNSUPPORTED(cuModuleGetGlobal)
UNSUPPORTED(cuModuleGetLoadingMode)
UNSUPPORTED(cuModuleGetSurfRef)
UNSUPPORTED(cuModuleGetTexRef)
UNSUPPORTED(cuModuleLoadFatBinary)
UNSUPPORTED(cuMulticastAddDevice)
UNSUPPORTED(cuMulticastBindAddr)
UNSUPPORTED(cuMulticastBindMem)
UNSUPPORTED(cuMulticastCreate)
UNSUPPORTED(cuMulticastGetGranularity)
UNSUPPORTED(cuMulticastUnbind)
UNSUPPORTED(cuOccupancyAvailableDynamicSMemPerBlock)
UNSUPPORTED(cuOccupancyMaxActiveBlocksPerMultiprocessor)
UNSUPPORTED(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)
UNSUPPORTED(cuOccupancyMaxActiveClusters)
UNSUPPORTED(cuOccupancyMaxPotentialBlockSize)
UNSUPPORTED(cuOccupancyMaxPotentialBlockSizeWithFlags)
UNSUPPORTED(cuOccupancyMaxPotentialClusterSize)
UNSUPPORTED(cuParamSetSize)
UNSUPPORTED(cuParamSetTexRef)
UNSUPPORTED(cuParamSetf)
UNSUPPORTED(cuParamSeti)
UNSUPPORTED(cuParamSetv)
UNSUPPORTED(cuPointerGetAttribute)
UNSUPPORTED(cuPointerGetAttributes)
UNSUPPORTED(cuPointerSetAttribute)
UNSUPPORTED(cuSignalExternalSemaphoresAsync)
UNSUPPORTED(cuStreamAddCallback)
UNSUPPORTED(cuStreamAttachMemAsync)
UNSUPPORTED(cuStreamBatchMemOp)
UNSUPPORTED(cuStreamBatchMemOp_ptsz)
UNSUPPORTED(cuStreamBatchMemOp_v2)
UNSUPPORTED(cuStreamBeginCapture)
UNSUPPORTED(cuStreamBeginCaptureToGraph)
UNSUPPORTED(cuStreamBeginCapture_ptsz)
UNSUPPORTED(cuStreamBeginCapture_v2)
UNSUPPORTED(cuStreamCopyAttributes)
UNSUPPORTED(cuStreamCreateWithPriority)
UNSUPPORTED(cuStreamDestroy)
UNSUPPORTED(cuStreamEndCapture)
UNSUPPORTED(cuStreamGetAttribute)
UNSUPPORTED(cuStreamGetCaptureInfo)
UNSUPPORTED(cuStreamGetCaptureInfo_ptsz)
UNSUPPORTED(cuStreamGetCaptureInfo_v2)
UNSUPPORTED(cuStreamGetCaptureInfo_v3)
UNSUPPORTED(cuStreamGetCtx)
UNSUPPORTED(cuStreamGetFlags)
UNSUPPORTED(cuStreamGetGreenCtx)
UNSUPPORTED(cuStreamGetId)
UNSUPPORTED(cuStreamGetPriority)
UNSUPPORTED(cuStreamIsCapturing)
UNSUPPORTED(cuStreamSetAttribute)
UNSUPPORTED(cuStreamUpdateCaptureDependencies)
UNSUPPORTED(cuStreamUpdateCaptureDependencies_v2)
UNSUPPORTED(cuStreamWaitValue32)
UNSUPPORTED(cuStreamWaitValue32_ptsz)
UNSUPPORTED(cuStreamWaitValue32_v2)
UNSUPPORTED(cuStreamWaitValue64)
UNSUPPORTED(cuStreamWaitValue64_ptsz)
UNSUPPORTED(cuStreamWaitValue64_v2)
UNSUPPORTED(cuStreamWriteValue32)
UNSUPPORTED(cuStreamWriteValue32_ptsz)
UNSUPPORTED(cuStreamWriteValue32_v2)
UNSUPPORTED(cuStreamWriteValue64)
UNSUPPORTED(cuStreamWriteValue64_ptsz)
UNSUPPORTED(cuStreamWriteValue64_v2)
UNSUPPORTED(cuSurfObjectCreate)
UNSUPPORTED(cuSurfObjectDestroy)
UNSUPPORTED(cuSurfObjectGetResourceDesc)
UNSUPPORTED(cuSurfRefGetArray)
UNSUPPORTED(cuSurfRefSetArray)
UNSUPPORTED(cuTensorMapEncodeIm2col)
UNSUPPORTED(cuTensorMapEncodeTiled)
UNSUPPORTED(cuTensorMapReplaceAddress)
UNSUPPORTED(cuTexObjectCreate)
UNSUPPORTED(cuTexObjectDestroy)
UNSUPPORTED(cuTexObjectGetResourceDesc)
UNSUPPORTED(cuTexObjectGetResourceViewDesc)
UNSUPPORTED(cuTexObjectGetTextureDesc)
UNSUPPORTED(cuTexRefCreate)
UNSUPPORTED(cuTexRefDestroy)
UNSUPPORTED(cuTexRefGetAddress)
UNSUPPORTED(cuTexRefGetAddressMode)
UNSUPPORTED(cuTexRefGetAddress_v2)
UNSUPPORTED(cuTexRefGetArray)
UNSUPPORTED(cuTexRefGetBorderColor)
UNSUPPORTED(cuTexRefGetFilterMode)
UNSUPPORTED(cuTexRefGetFlags)
UNSUPPORTED(cuTexRefGetFormat)
UNSUPPORTED(cuTexRefGetMaxAnisotropy)
UNSUPPORTED(cuTexRefGetMipmapFilterMode)
UNSUPPORTED(cuTexRefGetMipmapLevelBias)
UNSUPPORTED(cuTexRefGetMipmapLevelClamp)
UNSUPPORTED(cuTexRefGetMipmappedArray)
UNSUPPORTED(cuTexRefSetAddress)
UNSUPPORTED(cuTexRefSetAddress2D)
UNSUPPORTED(cuTexRefSetAddress2D_v2)
UNSUPPORTED(cuTexRefSetAddress2D_v3)
UNSUPPORTED(cuTexRefSetAddressMode)
UNSUPPORTED(cuTexRefSetAddress_v2)
UNSUPPORTED(cuTexRefSetArray)
UNSUPPORTED(cuTexRefSetBorderColor)
UNSUPPORTED(cuTexRefSetFilterMode)
UNSUPPORTED(cuTexRefSetFlags)
UNSUPPORTED(cuTexRefSetFormat)
UNSUPPORTED(cuTexRefSetMaxAnisotropy)
UNSUPPORTED(cuTexRefSetMipmapFilterMode)
UNSUPPORTED(cuTexRefSetMipmapLevelBias)
UNSUPPORTED(cuTexRefSetMipmapLevelClamp)
UNSUPPORTED(cuTexRefSetMipmappedArray)
UNSUPPORTED(cuThreadExchangeStreamCaptureMode)
UNSUPPORTED(cuUserObjectCreate)
UNSUPPORTED(cuUserObjectRelease)
UNSUPPORTED(cuUserObjectRetain)
UNSUPPORTED(cuWaitExternalSemaphoresAsync)

// unsupported is the stubs by name, for gmig_lookup.
const struct gmig_entry gmig_unsupported[] = {
	{"cuArray3DCreate", (void *)cuArray3DCreate},
	{"cuArray3DCreate_v2", (void *)cuArray3DCreate_v2},
	{"cuArray3DGetDescriptor", (void *)cuArray3DGetDescriptor},
	{"cuArray3DGetDescriptor_v2", (void *)cuArray3DGetDescriptor_v2},
	{"cuArrayCreate", (void *)cuArrayCreate},
	{"cuArrayCreate_v2", (void *)cuArrayCreate_v2},
	{"cuArrayDestroy", (void *)cuArrayDestroy},
	{"cuArrayGetDescriptor", (void *)cuArrayGetDescriptor},
	{"cuArrayGetDescriptor_v2", (void *)cuArrayGetDescriptor_v2},
	{"cuArrayGetMemoryRequirements", (void *)cuArrayGetMemoryRequirements},
	{"cuArrayGetPlane", (void *)cuArrayGetPlane},
	{"cuArrayGetSparseProperties", (void *)cuArrayGetSparseProperties},
	{"cuCoredumpGetAttribute", (void *)cuCoredumpGetAttribute},
	{"cuCoredumpGetAttributeGlobal", (void *)cuCoredumpGetAttributeGlobal},
	{"cuCoredumpSetAttribute", (void *)cuCoredumpSetAttribute},
	{"cuCoredumpSetAttributeGlobal", (void *)cuCoredumpSetAttributeGlobal},
	{"cuCtxAttach", (void *)cuCtxAttach},
	{"cuCtxCreate", (void *)cuCtxCreate},
	{"cuCtxCreate_v3", (void *)cuCtxCreate_v3},
	{"cuCtxDestroy", (void *)cuCtxDestroy},
	{"cuCtxDetach", (void *)cuCtxDetach},
	{"cuCtxDisablePeerAccess", (void *)cuCtxDisablePeerAccess},
	{"cuCtxEnablePeerAccess", (void *)cuCtxEnablePeerAccess},
	{"cuCtxFromGreenCtx", (void *)cuCtxFromGreenCtx},
	{"cuCtxGetApiVersion", (void *)cuCtxGetApiVersion},
	{"cuCtxGetCacheConfig", (void *)cuCtxGetCacheConfig},
	{"cuCtxGetDevResource", (void *)cuCtxGetDevResource},
	{"cuCtxGetExecAffinity", (void *)cuCtxGetExecAffinity},
	{"cuCtxGetFlags", (void *)cuCtxGetFlags},
	{"cuCtxGetId", (void *)cuCtxGetId},
	{"cuCtxGetLimit", (void *)cuCtxGetLimit},
	{"cuCtxGetSharedMemConfig", (void *)cuCtxGetSharedMemConfig},
	{"cuCtxGetStreamPriorityRange", (void *)cuCtxGetStreamPriorityRange},
	{"cuCtxPopCurrent", (void *)cuCtxPopCurrent},
	{"cuCtxPushCurrent", (void *)cuCtxPushCurrent},
	{"cuCtxResetPersistingL2Cache", (void *)cuCtxResetPersistingL2Cache},
	{"cuCtxSetCacheConfig", (void *)cuCtxSetCacheConfig},
	{"cuCtxSetFlags", (void *)cuCtxSetFlags},
	{"cuCtxSetLimit", (void *)cuCtxSetLimit},
	{"cuCtxSetSharedMemConfig", (void *)cuCtxSetSharedMemConfig},
	{"cuDestroyExternalMemory", (void *)cuDestroyExternalMemory},
	{"cuDestroyExternalSemaphore", (void *)cuDestroyExternalSemaphore},
	{"cuDevResourceGenerateDesc", (void *)cuDevResourceGenerateDesc},
	{"cuDevSmResourceSplitByCount", (void *)cuDevSmResourceSplitByCount},
	{"cuDeviceCanAccessPeer", (void *)cuDeviceCanAccessPeer},
	{"cuDeviceGetByPCIBusId", (void *)cuDeviceGetByPCIBusId},
	{"cuDeviceGetDefaultMemPool", (void *)cuDeviceGetDefaultMemPool},
	{"cuDeviceGetDevResource", (void *)cuDeviceGetDevResource},
	{"cuDeviceGetExecAffinitySupport", (void *)cuDeviceGetExecAffinitySupport},
	{"cuDeviceGetGraphMemAttribute", (void *)cuDeviceGetGraphMemAttribute},
	{"cuDeviceGetLuid", (void *)cuDeviceGetLuid},
	{"cuDeviceGetMemPool", (void *)cuDeviceGetMemPool},
	{"cuDeviceGetNvSciSyncAttributes", (void *)cuDeviceGetNvSciSyncAttributes},
	{"cuDeviceGetP2PAttribute", (void *)cuDeviceGetP2PAttribute},
	{"cuDeviceGetPCIBusId", (void *)cuDeviceGetPCIBusId},
	{"cuDeviceGetProperties", (void *)cuDeviceGetProperties},
	{"cuDeviceGetTexture1DLinearMaxWidth", (void *)cuDeviceGetTexture1DLinearMaxWidth},
	{"cuDeviceGraphMemTrim", (void *)cuDeviceGraphMemTrim},
	{"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease},
	{"cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset},
	{"cuDevicePrimaryCtxSetFlags", (void *)cuDevicePrimaryCtxSetFlags},
	{"cuDeviceRegisterAsyncNotification", (void *)cuDeviceRegisterAsyncNotification},
	{"cuDeviceSetGraphMemAttribute", (void *)cuDeviceSetGraphMemAttribute},
	{"cuDeviceSetMemPool", (void *)cuDeviceSetMemPool},
	{"cuDeviceTotalMem", (void *)cuDeviceTotalMem},
	{"cuDeviceUnregisterAsyncNotification", (void *)cuDeviceUnregisterAsyncNotification},
	{"cuEventDestroy", (void *)cuEventDestroy},
	{"cuEventRecordWithFlags", (void *)cuEventRecordWithFlags},
	{"cuExternalMemoryGetMappedBuffer", (void *)cuExternalMemoryGetMappedBuffer},
	{"cuExternalMemoryGetMappedMipmappedArray", (void *)cuExternalMemoryGetMappedMipmappedArray},
	{"cuFlushGPUDirectRDMAWrites", (void *)cuFlushGPUDirectRDMAWrites},
	{"cuFuncGetAttribute", (void *)cuFuncGetAttribute},
	{"cuFuncGetModule", (void *)cuFuncGetModule},
	{"cuFuncGetName", (void *)cuFuncGetName},
	{"cuFuncGetParamInfo", (void *)cuFuncGetParamInfo},
	{"cuFuncIsLoaded", (void *)cuFuncIsLoaded},
	{"cuFuncLoad", (void *)cuFuncLoad},
	{"cuFuncSetAttribute", (void *)cuFuncSetAttribute},
	{"cuFuncSetBlockShape", (void *)cuFuncSetBlockShape},
	{"cuFuncSetCacheConfig", (void *)cuFuncSetCacheConfig},
	{"cuFuncSetSharedMemConfig", (void *)cuFuncSetSharedMemConfig},
	{"cuFuncSetSharedSize", (void *)cuFuncSetSharedSize},
	{"cuGetExportTable", (void *)cuGetExportTable},
	{"cuGraphAddBatchMemOpNode", (void *)cuGraphAddBatchMemOpNode},
	{"cuGraphAddChildGraphNode", (void *)cuGraphAddChildGraphNode},
	{"cuGraphAddDependencies", (void *)cuGraphAddDependencies},
	{"cuGraphAddDependencies_v2", (void *)cuGraphAddDependencies_v2},
	{"cuGraphAddEmptyNode", (void *)cuGraphAddEmptyNode},
	{"cuGraphAddEventRecordNode", (void *)cuGraphAddEventRecordNode},
	{"cuGraphAddEventWaitNode", (void *)cuGraphAddEventWaitNode},
	{"cuGraphAddExternalSemaphoresSignalNode", (void *)cuGraphAddExternalSemaphoresSignalNode},
	{"cuGraphAddExternalSemaphoresWaitNode", (void *)cuGraphAddExternalSemaphoresWaitNode},
	{"cuGraphAddHostNode", (void *)cuGraphAddHostNode},
	{"cuGraphAddKernelNode", (void *)cuGraphAddKernelNode},
	{"cuGraphAddKernelNode_v2", (void *)cuGraphAddKernelNode_v2},
	{"cuGraphAddMemAllocNode", (void *)cuGraphAddMemAllocNode},
	{"cuGraphAddMemFreeNode", (void *)cuGraphAddMemFreeNode},
	{"cuGraphAddMemcpyNode", (void *)cuGraphAddMemcpyNode},
	{"cuGraphAddMemsetNode", (void *)cuGraphAddMemsetNode},
	{"cuGraphAddNode", (void *)cuGraphAddNode},
	{"cuGraphAddNode_v2", (void *)cuGraphAddNode_v2},
	{"cuGraphBatchMemOpNodeGetParams", (void *)cuGraphBatchMemOpNodeGetParams},
	{"cuGraphBatchMemOpNodeSetParams", (void *)cuGraphBatchMemOpNodeSetParams},
	{"cuGraphChildGraphNodeGetGraph", (void *)cuGraphChildGraphNodeGetGraph},
	{"cuGraphClone", (void *)cuGraphClone},
	{"cuGraphConditionalHandleCreate", (void *)cuGraphConditionalHandleCreate},
	{"cuGraphCreate", (void *)cuGraphCreate},
	{"cuGraphDebugDotPrint", (void *)cuGraphDebugDotPrint},
	{"cuGraphDestroy", (void *)cuGraphDestroy},
	{"cuGraphDestroyNode", (void *)cuGraphDestroyNode},
	{"cuGraphEventRecordNodeGetEvent", (void *)cuGraphEventRecordNodeGetEvent},
	{"cuGraphEventRecordNodeSetEvent", (void *)cuGraphEventRecordNodeSetEvent},
	{"cuGraphEventWaitNodeGetEvent", (void *)cuGraphEventWaitNodeGetEvent},
	{"cuGraphEventWaitNodeSetEvent", (void *)cuGraphEventWaitNodeSetEvent},
	{"cuGraphExecBatchMemOpNodeSetParams", (void *)cuGraphExecBatchMemOpNodeSetParams},
	{"cuGraphExecChildGraphNodeSetParams", (void *)cuGraphExecChildGraphNodeSetParams},
	{"cuGraphExecDestroy", (void *)cuGraphExecDestroy},
	{"cuGraphExecEventRecordNodeSetEvent", (void *)cuGraphExecEventRecordNodeSetEvent},
	{"cuGraphExecEventWaitNodeSetEvent", (void *)cuGraphExecEventWaitNodeSetEvent},
	{"cuGraphExecExternalSemaphoresSignalNodeSetParams", (void *)cuGraphExecExternalSemaphoresSignalNodeSetParams},
	{"cuGraphExecExternalSemaphoresWaitNodeSetParams", (void *)cuGraphExecExternalSemaphoresWaitNodeSetParams},
	{"cuGraphExecGetFlags", (void *)cuGraphExecGetFlags},
	{"cuGraphExecHostNodeSetParams", (void *)cuGraphExecHostNodeSetParams},
	{"cuGraphExecKernelNodeSetParams", (void *)cuGraphExecKernelNodeSetParams},
	{"cuGraphExecKernelNodeSetParams_v2", (void *)cuGraphExecKernelNodeSetParams_v2},
	{"cuGraphExecMemcpyNodeSetParams", (void *)cuGraphExecMemcpyNodeSetParams},
	{"cuGraphExecMemsetNodeSetParams", (void *)cuGraphExecMemsetNodeSetParams},
	{"cuGraphExecNodeSetParams", (void *)cuGraphExecNodeSetParams},
	{"cuGraphExecUpdate", (void *)cuGraphExecUpdate},
	{"cuGraphExecUpdate_v2", (void *)cuGraphExecUpdate_v2},
	{"cuGraphExternalSemaphoresSignalNodeGetParams", (void *)cuGraphExternalSemaphoresSignalNodeGetParams},
	{"cuGraphExternalSemaphoresSignalNodeSetParams", (void *)cuGraphExternalSemaphoresSignalNodeSetParams},
	{"cuGraphExternalSemaphoresWaitNodeGetParams", (void *)cuGraphExternalSemaphoresWaitNodeGetParams},
	{"cuGraphExternalSemaphoresWaitNodeSetParams", (void *)cuGraphExternalSemaphoresWaitNodeSetParams},
	{"cuGraphGetEdges", (void *)cuGraphGetEdges},
	{"cuGraphGetEdges_v2", (void *)cuGraphGetEdges_v2},
	{"cuGraphGetNodes", (void *)cuGraphGetNodes},
	{"cuGraphGetRootNodes", (void *)cuGraphGetRootNodes},
	{"cuGraphHostNodeGetParams", (void *)cuGraphHostNodeGetParams},
	{"cuGraphHostNodeSetParams", (void *)cuGraphHostNodeSetParams},
	{"cuGraphInstantiate", (void *)cuGraphInstantiate},
	{"cuGraphInstantiateWithFlags", (void *)cuGraphInstantiateWithFlags},
	{"cuGraphInstantiateWithParams", (void *)cuGraphInstantiateWithParams},
	{"cuGraphInstantiate_v2", (void *)cuGraphInstantiate_v2},
	{"cuGraphKernelNodeCopyAttributes", (void *)cuGraphKernelNodeCopyAttributes},
	{"cuGraphKernelNodeGetAttribute", (void *)cuGraphKernelNodeGetAttribute},
	{"cuGraphKernelNodeGetParams", (void *)cuGraphKernelNodeGetParams},
	{"cuGraphKernelNodeGetParams_v2", (void *)cuGraphKernelNodeGetParams_v2},
	{"cuGraphKernelNodeSetAttribute", (void *)cuGraphKernelNodeSetAttribute},
	{"cuGraphKernelNodeSetParams", (void *)cuGraphKernelNodeSetParams},
	{"cuGraphKernelNodeSetParams_v2", (void *)cuGraphKernelNodeSetParams_v2},
	{"cuGraphLaunch", (void *)cuGraphLaunch},
	{"cuGraphMemAllocNodeGetParams", (void *)cuGraphMemAllocNodeGetParams},
	{"cuGraphMemFreeNodeGetParams", (void *)cuGraphMemFreeNodeGetParams},
	{"cuGraphMemcpyNodeGetParams", (void *)cuGraphMemcpyNodeGetParams},
	{"cuGraphMemcpyNodeSetParams", (void *)cuGraphMemcpyNodeSetParams},
	{"cuGraphMemsetNodeGetParams", (void *)cuGraphMemsetNodeGetParams},
	{"cuGraphMemsetNodeSetParams", (void *)cuGraphMemsetNodeSetParams},
	{"cuGraphNodeFindInClone", (void *)cuGraphNodeFindInClone},
	{"cuGraphNodeGetDependencies", (void *)cuGraphNodeGetDependencies},
	{"cuGraphNodeGetDependencies_v2", (void *)cuGraphNodeGetDependencies_v2},
	{"cuGraphNodeGetDependentNodes", (void *)cuGraphNodeGetDependentNodes},
	{"cuGraphNodeGetDependentNodes_v2", (void *)cuGraphNodeGetDependentNodes_v2},
	{"cuGraphNodeGetEnabled", (void *)cuGraphNodeGetEnabled},
	{"cuGraphNodeGetType", (void *)cuGraphNodeGetType},
	{"cuGraphNodeSetEnabled", (void *)cuGraphNodeSetEnabled},
	{"cuGraphNodeSetParams", (void *)cuGraphNodeSetParams},
	{"cuGraphReleaseUserObject", (void *)cuGraphReleaseUserObject},
	{"cuGraphRemoveDependencies", (void *)cuGraphRemoveDependencies},
	{"cuGraphRemoveDependencies_v2", (void *)cuGraphRemoveDependencies_v2},
	{"cuGraphRetainUserObject", (void *)cuGraphRetainUserObject},
	{"cuGraphUpload", (void *)cuGraphUpload},
	{"cuGraphicsMapResources", (void *)cuGraphicsMapResources},
	{"cuGraphicsResourceGetMappedMipmappedArray", (void *)cuGraphicsResourceGetMappedMipmappedArray},
	{"cuGraphicsResourceGetMappedPointer", (void *)cuGraphicsResourceGetMappedPointer},
	{"cuGraphicsResourceGetMappedPointer_v2", (void *)cuGraphicsResourceGetMappedPointer_v2},
	{"cuGraphicsResourceSetMapFlags", (void *)cuGraphicsResourceSetMapFlags},
	{"cuGraphicsResourceSetMapFlags_v2", (void *)cuGraphicsResourceSetMapFlags_v2},
	{"cuGraphicsSubResourceGetMappedArray", (void *)cuGraphicsSubResourceGetMappedArray},
	{"cuGraphicsUnmapResources", (void *)cuGraphicsUnmapResources},
	{"cuGraphicsUnregisterResource", (void *)cuGraphicsUnregisterResource},
	{"cuGreenCtxCreate", (void *)cuGreenCtxCreate},
	{"cuGreenCtxDestroy", (void *)cuGreenCtxDestroy},
	{"cuGreenCtxGetDevResource", (void *)cuGreenCtxGetDevResource},
	{"cuGreenCtxRecordEvent", (void *)cuGreenCtxRecordEvent},
	{"cuGreenCtxWaitEvent", (void *)cuGreenCtxWaitEvent},
	{"cuImportExternalMemory", (void *)cuImportExternalMemory},
	{"cuImportExternalSemaphore", (void *)cuImportExternalSemaphore},
	{"cuIpcCloseMemHandle", (void *)cuIpcCloseMemHandle},
	{"cuIpcGetEventHandle", (void *)cuIpcGetEventHandle},
	{"cuIpcGetMemHandle", (void *)cuIpcGetMemHandle},
	{"cuIpcOpenEventHandle", (void *)cuIpcOpenEventHandle},
	{"cuIpcOpenMemHandle", (void *)cuIpcOpenMemHandle},
	{"cuIpcOpenMemHandle_v2", (void *)cuIpcOpenMemHandle_v2},
	{"cuKernelGetAttribute", (void *)cuKernelGetAttribute},
	{"cuKernelGetFunction", (void *)cuKernelGetFunction},
	{"cuKernelGetName", (void *)cuKernelGetName},
	{"cuKernelGetParamInfo", (void *)cuKernelGetParamInfo},
	{"cuKernelSetAttribute", (void *)cuKernelSetAttribute},
	{"cuKernelSetCacheConfig", (void *)cuKernelSetCacheConfig},
	{"cuLaunch", (void *)cuLaunch},
	{"cuLaunchCooperativeKernel", (void *)cuLaunchCooperativeKernel},
	{"cuLaunchCooperativeKernelMultiDevice", (void *)cuLaunchCooperativeKernelMultiDevice},
	{"cuLaunchGrid", (void *)cuLaunchGrid},
	{"cuLaunchGridAsync", (void *)cuLaunchGridAsync},
	{"cuLaunchHostFunc", (void *)cuLaunchHostFunc},
	{"cuLaunchKernelEx", (void *)cuLaunchKernelEx},
	{"cuLibraryEnumerateKernels", (void *)cuLibraryEnumerateKernels},
	{"cuLibraryGetGlobal", (void *)cuLibraryGetGlobal},
	{"cuLibraryGetKernel", (void *)cuLibraryGetKernel},
	{"cuLibraryGetKernelCount", (void *)cuLibraryGetKernelCount},
	{"cuLibraryGetManaged", (void *)cuLibraryGetManaged},
	{"cuLibraryGetModule", (void *)cuLibraryGetModule},
	{"cuLibraryGetUnifiedFunction", (void *)cuLibraryGetUnifiedFunction},
	{"cuLibraryLoadData", (void *)cuLibraryLoadData},
	{"cuLibraryLoadFromFile", (void *)cuLibraryLoadFromFile},
	{"cuLibraryUnload", (void *)cuLibraryUnload},
	{"cuLinkAddData", (void *)cuLinkAddData},
	{"cuLinkAddData_v2", (void *)cuLinkAddData_v2},
	{"cuLinkAddFile", (void *)cuLinkAddFile},
	{"cuLinkAddFile_v2", (void *)cuLinkAddFile_v2},
	{"cuLinkCreate", (void *)cuLinkCreate},
	{"cuLinkCreate_v2", (void *)cuLinkCreate_v2},
	{"cuMemAddressFree", (void *)cuMemAddressFree},
	{"cuMemAddressReserve", (void *)cuMemAddressReserve},
	{"cuMemAdvise", (void *)cuMemAdvise},
	{"cuMemAdvise_v2", (void *)cuMemAdvise_v2},
	{"cuMemAlloc", (void *)cuMemAlloc},
	{"cuMemAllocAsync", (void *)cuMemAllocAsync},
	{"cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync},
	{"cuMemAllocHost", (void *)cuMemAllocHost},
	{"cuMemAllocHost_v2", (void *)cuMemAllocHost_v2},
	{"cuMemAllocManaged", (void *)cuMemAllocManaged},
	{"cuMemAllocPitch", (void *)cuMemAllocPitch},
	{"cuMemAllocPitch_v2", (void *)cuMemAllocPitch_v2},
	{"cuMemCreate", (void *)cuMemCreate},
	{"cuMemExportToShareableHandle", (void *)cuMemExportToShareableHandle},
	{"cuMemFree", (void *)cuMemFree},
	{"cuMemFreeAsync", (void *)cuMemFreeAsync},
	{"cuMemFreeHost", (void *)cuMemFreeHost},
	{"cuMemGetAccess", (void *)cuMemGetAccess},
	{"cuMemGetAddressRange", (void *)cuMemGetAddressRange},
	{"cuMemGetAllocationGranularity", (void *)cuMemGetAllocationGranularity},
	{"cuMemGetAllocationPropertiesFromHandle", (void *)cuMemGetAllocationPropertiesFromHandle},
	{"cuMemGetHandleForAddressRange", (void *)cuMemGetHandleForAddressRange},
	{"cuMemGetInfo", (void *)cuMemGetInfo},
	{"cuMemHostAlloc", (void *)cuMemHostAlloc},
	{"cuMemHostGetDevicePointer", (void *)cuMemHostGetDevicePointer},
	{"cuMemHostGetDevicePointer_v2", (void *)cuMemHostGetDevicePointer_v2},
	{"cuMemHostGetFlags", (void *)cuMemHostGetFlags},
	{"cuMemHostRegister", (void *)cuMemHostRegister},
	{"cuMemHostRegister_v2", (void *)cuMemHostRegister_v2},
	{"cuMemHostUnregister", (void *)cuMemHostUnregister},
	{"cuMemImportFromShareableHandle", (void *)cuMemImportFromShareableHandle},
	{"cuMemMap", (void *)cuMemMap},
	{"cuMemMapArrayAsync", (void *)cuMemMapArrayAsync},
	{"cuMemPoolCreate", (void *)cuMemPoolCreate},
	{"cuMemPoolDestroy", (void *)cuMemPoolDestroy},
	{"cuMemPoolExportPointer", (void *)cuMemPoolExportPointer},
	{"cuMemPoolExportToShareableHandle", (void *)cuMemPoolExportToShareableHandle},
	{"cuMemPoolGetAccess", (void *)cuMemPoolGetAccess},
	{"cuMemPoolGetAttribute", (void *)cuMemPoolGetAttribute},
	{"cuMemPoolImportFromShareableHandle", (void *)cuMemPoolImportFromShareableHandle},
	{"cuMemPoolImportPointer", (void *)cuMemPoolImportPointer},
	{"cuMemPoolSetAccess", (void *)cuMemPoolSetAccess},
	{"cuMemPoolSetAttribute", (void *)cuMemPoolSetAttribute},
	{"cuMemPoolTrimTo", (void *)cuMemPoolTrimTo},
	{"cuMemPrefetchAsync", (void *)cuMemPrefetchAsync},
	{"cuMemPrefetchAsync_v2", (void *)cuMemPrefetchAsync_v2},
	{"cuMemRangeGetAttribute", (void *)cuMemRangeGetAttribute},
	{"cuMemRangeGetAttributes", (void *)cuMemRangeGetAttributes},
	{"cuMemRelease", (void *)cuMemRelease},
	{"cuMemRetainAllocationHandle", (void *)cuMemRetainAllocationHandle},
	{"cuMemSetAccess", (void *)cuMemSetAccess},
	{"cuMemUnmap", (void *)cuMemUnmap},
	{"cuMemcpy", (void *)cuMemcpy},
	{"cuMemcpy2D", (void *)cuMemcpy2D},
	{"cuMemcpy2DAsync", (void *)cuMemcpy2DAsync},
	{"cuMemcpy2DAsync_v2", (void *)cuMemcpy2DAsync_v2},
	{"cuMemcpy2DUnaligned", (void *)cuMemcpy2DUnaligned},
	{"cuMemcpy2DUnaligned_v2", (void *)cuMemcpy2DUnaligned_v2},
	{"cuMemcpy2D_v2", (void *)cuMemcpy2D_v2},
	{"cuMemcpy3D", (void *)cuMemcpy3D},
	{"cuMemcpy3DAsync", (void *)cuMemcpy3DAsync},
	{"cuMemcpy3DAsync_v2", (void *)cuMemcpy3DAsync_v2},
	{"cuMemcpy3DPeer", (void *)cuMemcpy3DPeer},
	{"cuMemcpy3DPeerAsync", (void *)cuMemcpy3DPeerAsync},
	{"cuMemcpy3D_v2", (void *)cuMemcpy3D_v2},
	{"cuMemcpyAsync", (void *)cuMemcpyAsync},
	{"cuMemcpyAtoA", (void *)cuMemcpyAtoA},
	{"cuMemcpyAtoA_v2", (void *)cuMemcpyAtoA_v2},
	{"cuMemcpyAtoD", (void *)cuMemcpyAtoD},
	{"cuMemcpyAtoD_v2", (void *)cuMemcpyAtoD_v2},
	{"cuMemcpyAtoH", (void *)cuMemcpyAtoH},
	{"cuMemcpyAtoHAsync", (void *)cuMemcpyAtoHAsync},
	{"cuMemcpyAtoHAsync_v2", (void *)cuMemcpyAtoHAsync_v2},
	{"cuMemcpyAtoH_v2", (void *)cuMemcpyAtoH_v2},
	{"cuMemcpyDtoA", (void *)cuMemcpyDtoA},
	{"cuMemcpyDtoA_v2", (void *)cuMemcpyDtoA_v2},
	{"cuMemcpyDtoD", (void *)cuMemcpyDtoD},
	{"cuMemcpyDtoDAsync", (void *)cuMemcpyDtoDAsync},
	{"cuMemcpyDtoH", (void *)cuMemcpyDtoH},
	{"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync},
	{"cuMemcpyHtoA", (void *)cuMemcpyHtoA},
	{"cuMemcpyHtoAAsync", (void *)cuMemcpyHtoAAsync},
	{"cuMemcpyHtoAAsync_v2", (void *)cuMemcpyHtoAAsync_v2},
	{"cuMemcpyHtoA_v2", (void *)cuMemcpyHtoA_v2},
	{"cuMemcpyHtoD", (void *)cuMemcpyHtoD},
	{"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync},
	{"cuMemcpyPeer", (void *)cuMemcpyPeer},
	{"cuMemcpyPeerAsync", (void *)cuMemcpyPeerAsync},
	{"cuMemsetD16", (void *)cuMemsetD16},
	{"cuMemsetD2D16", (void *)cuMemsetD2D16},
	{"cuMemsetD2D16Async", (void *)cuMemsetD2D16Async},
	{"cuMemsetD2D16_v2", (void *)cuMemsetD2D16_v2},
	{"cuMemsetD2D32", (void *)cuMemsetD2D32},
	{"cuMemsetD2D32Async", (void *)cuMemsetD2D32Async},
	{"cuMemsetD2D32_v2", (void *)cuMemsetD2D32_v2},
	{"cuMemsetD2D8", (void *)cuMemsetD2D8},
	{"cuMemsetD2D8Async", (void *)cuMemsetD2D8Async},
	{"cuMemsetD2D8_v2", (void *)cuMemsetD2D8_v2},
	{"cuMemsetD32", (void *)cuMemsetD32},
	{"cuMemsetD8", (void *)cuMemsetD8},
	{"cuMipmappedArrayCreate", (void *)cuMipmappedArrayCreate},
	{"cuMipmappedArrayDestroy", (void *)cuMipmappedArrayDestroy},
	{"cuMipmappedArrayGetLevel", (void *)cuMipmappedArrayGetLevel},
	{"cuMipmappedArrayGetMemoryRequirements", (void *)cuMipmappedArrayGetMemoryRequirements},
	{"cuMipmappedArrayGetSparseProperties", (void *)cuMipmappedArrayGetSparseProperties},
	{"cuModuleEnumerateFunctions", (void *)cuModuleEnumerateFunctions},
	{"cuModuleGetFunctionCount", (void *)cuModuleGetFunctionCount},
	{"cuModuleGetGlobal", (void *)cuModuleGetGlobal},
	{"cuModuleGetLoadingMode", (void *)cuModuleGetLoadingMode},
	{"cuModuleGetSurfRef", (void *)cuModuleGetSurfRef},
	{"cuModuleGetTexRef", (void *)cuModuleGetTexRef},
	{"cuModuleLoadFatBinary", (void *)cuModuleLoadFatBinary},
	{"cuMulticastAddDevice", (void *)cuMulticastAddDevice},
	{"cuMulticastBindAddr", (void *)cuMulticastBindAddr},
	{"cuMulticastBindMem", (void *)cuMulticastBindMem},
	{"cuMulticastCreate", (void *)cuMulticastCreate},
	{"cuMulticastGetGranularity", (void *)cuMulticastGetGranularity},
	{"cuMulticastUnbind", (void *)cuMulticastUnbind},
	{"cuOccupancyAvailableDynamicSMemPerBlock", (void *)cuOccupancyAvailableDynamicSMemPerBlock},
	{"cuOccupancyMaxActiveBlocksPerMultiprocessor", (void *)cuOccupancyMaxActiveBlocksPerMultiprocessor},
	{"cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", (void *)cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags},
	{"cuOccupancyMaxActiveClusters", (void *)cuOccupancyMaxActiveClusters},
	{"cuOccupancyMaxPotentialBlockSize", (void *)cuOccupancyMaxPotentialBlockSize},
	{"cuOccupancyMaxPotentialBlockSizeWithFlags", (void *)cuOccupancyMaxPotentialBlockSizeWithFlags},
	{"cuOccupancyMaxPotentialClusterSize", (void *)cuOccupancyMaxPotentialClusterSize},
	{"cuParamSetSize", (void *)cuParamSetSize},
	{"cuParamSetTexRef", (void *)cuParamSetTexRef},
	{"cuParamSetf", (void *)cuParamSetf},
	{"cuParamSeti", (void *)cuParamSeti},
	{"cuParamSetv", (void *)cuParamSetv},
	{"cuPointerGetAttribute", (void *)cuPointerGetAttribute},
	{"cuPointerGetAttributes", (void *)cuPointerGetAttributes},
	{"cuPointerSetAttribute", (void *)cuPointerSetAttribute},
	{"cuSignalExternalSemaphoresAsync", (void *)cuSignalExternalSemaphoresAsync},
	{"cuStreamAddCallback", (void *)cuStreamAddCallback},
	{"cuStreamAttachMemAsync", (void *)cuStreamAttachMemAsync},
	{"cuStreamBatchMemOp", (void *)cuStreamBatchMemOp},
	{"cuStreamBatchMemOp_ptsz", (void *)cuStreamBatchMemOp_ptsz},
	{"cuStreamBatchMemOp_v2", (void *)cuStreamBatchMemOp_v2},
	{"cuStreamBeginCapture", (void *)cuStreamBeginCapture},
	{"cuStreamBeginCaptureToGraph", (void *)cuStreamBeginCaptureToGraph},
	{"cuStreamBeginCapture_ptsz", (void *)cuStreamBeginCapture_ptsz},
	{"cuStreamBeginCapture_v2", (void *)cuStreamBeginCapture_v2},
	{"cuStreamCopyAttributes", (void *)cuStreamCopyAttributes},
	{"cuStreamCreateWithPriority", (void *)cuStreamCreateWithPriority},
	{"cuStreamDestroy", (void *)cuStreamDestroy},
	{"cuStreamEndCapture", (void *)cuStreamEndCapture},
	{"cuStreamGetAttribute", (void *)cuStreamGetAttribute},
	{"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo},
	{"cuStreamGetCaptureInfo_ptsz", (void *)cuStreamGetCaptureInfo_ptsz},
	{"cuStreamGetCaptureInfo_v2", (void *)cuStreamGetCaptureInfo_v2},
	{"cuStreamGetCaptureInfo_v3", (void *)cuStreamGetCaptureInfo_v3},
	{"cuStreamGetCtx", (void *)cuStreamGetCtx},
	{"cuStreamGetFlags", (void *)cuStreamGetFlags},
	{"cuStreamGetGreenCtx", (void *)cuStreamGetGreenCtx},
	{"cuStreamGetId", (void *)cuStreamGetId},
	{"cuStreamGetPriority", (void *)cuStreamGetPriority},
	{"cuStreamIsCapturing", (void *)cuStreamIsCapturing},
	{"cuStreamSetAttribute", (void *)cuStreamSetAttribute},
	{"cuStreamUpdateCaptureDependencies", (void *)cuStreamUpdateCaptureDependencies},
	{"cuStreamUpdateCaptureDependencies_v2", (void *)cuStreamUpdateCaptureDependencies_v2},
	{"cuStreamWaitValue32", (void *)cuStreamWaitValue32},
	{"cuStreamWaitValue32_ptsz", (void *)cuStreamWaitValue32_ptsz},
	{"cuStreamWaitValue32_v2", (void *)cuStreamWaitValue32_v2},
	{"cuStreamWaitValue64", (void *)cuStreamWaitValue64},
	{"cuStreamWaitValue64_ptsz", (void *)cuStreamWaitValue64_ptsz},
	{"cuStreamWaitValue64_v2", (void *)cuStreamWaitValue64_v2},
	{"cuStreamWriteValue32", (void *)cuStreamWriteValue32},
	{"cuStreamWriteValue32_ptsz", (void *)cuStreamWriteValue32_ptsz},
	{"cuStreamWriteValue32_v2", (void *)cuStreamWriteValue32_v2},
	{"cuStreamWriteValue64", (void *)cuStreamWriteValue64},
	{"cuStreamWriteValue64_ptsz", (void *)cuStreamWriteValue64_ptsz},
	{"cuStreamWriteValue64_v2", (void *)cuStreamWriteValue64_v2},
	{"cuSurfObjectCreate", (void *)cuSurfObjectCreate},
	{"cuSurfObjectDestroy", (void *)cuSurfObjectDestroy},
	{"cuSurfObjectGetResourceDesc", (void *)cuSurfObjectGetResourceDesc},
	{"cuSurfRefGetArray", (void *)cuSurfRefGetArray},
	{"cuSurfRefSetArray", (void *)cuSurfRefSetArray},
	{"cuTensorMapEncodeIm2col", (void *)cuTensorMapEncodeIm2col},
	{"cuTensorMapEncodeTiled", (void *)cuTensorMapEncodeTiled},
	{"cuTensorMapReplaceAddress", (void *)cuTensorMapReplaceAddress},
	{"cuTexObjectCreate", (void *)cuTexObjectCreate},
	{"cuTexObjectDestroy", (void *)cuTexObjectDestroy},
	{"cuTexObjectGetResourceDesc", (void *)cuTexObjectGetResourceDesc},
	{"cuTexObjectGetResourceViewDesc", (void *)cuTexObjectGetResourceViewDesc},
	{"cuTexObjectGetTextureDesc", (void *)cuTexObjectGetTextureDesc},
	{"cuTexRefCreate", (void *)cuTexRefCreate},
	{"cuTexRefDestroy", (void *)cuTexRefDestroy},
	{"cuTexRefGetAddress", (void *)cuTexRefGetAddress},
	{"cuTexRefGetAddressMode", (void *)cuTexRefGetAddressMode},
	{"cuTexRefGetAddress_v2", (void *)cuTexRefGetAddress_v2},
	{"cuTexRefGetArray", (void *)cuTexRefGetArray},
	{"cuTexRefGetBorderColor", (void *)cuTexRefGetBorderColor},
	{"cuTexRefGetFilterMode", (void *)cuTexRefGetFilterMode},
	{"cuTexRefGetFlags", (void *)cuTexRefGetFlags},
	{"cuTexRefGetFormat", (void *)cuTexRefGetFormat},
	{"cuTexRefGetMaxAnisotropy", (void *)cuTexRefGetMaxAnisotropy},
	{"cuTexRefGetMipmapFilterMode", (void *)cuTexRefGetMipmapFilterMode},
	{"cuTexRefGetMipmapLevelBias", (void *)cuTexRefGetMipmapLevelBias},
	{"cuTexRefGetMipmapLevelClamp", (void *)cuTexRefGetMipmapLevelClamp},
	{"cuTexRefGetMipmappedArray", (void *)cuTexRefGetMipmappedArray},
	{"cuTexRefSetAddress", (void *)cuTexRefSetAddress},
	{"cuTexRefSetAddress2D", (void *)cuTexRefSetAddress2D},
	{"cuTexRefSetAddress2D_v2", (void *)cuTexRefSetAddress2D_v2},
	{"cuTexRefSetAddress2D_v3", (void *)cuTexRefSetAddress2D_v3},
	{"cuTexRefSetAddressMode", (void *)cuTexRefSetAddressMode},
	{"cuTexRefSetAddress_v2", (void *)cuTexRefSetAddress_v2},
	{"cuTexRefSetArray", (void *)cuTexRefSetArray},
	{"cuTexRefSetBorderColor", (void *)cuTexRefSetBorderColor},
	{"cuTexRefSetFilterMode", (void *)cuTexRefSetFilterMode},
	{"cuTexRefSetFlags", (void *)cuTexRefSetFlags},
	{"cuTexRefSetFormat", (void *)cuTexRefSetFormat},
	{"cuTexRefSetMaxAnisotropy", (void *)cuTexRefSetMaxAnisotropy},
	{"cuTexRefSetMipmapFilterMode", (void *)cuTexRefSetMipmapFilterMode},
	{"cuTexRefSetMipmapLevelBias", (void *)cuTexRefSetMipmapLevelBias},
	{"cuTexRefSetMipmapLevelClamp", (void *)cuTexRefSetMipmapLevelClamp},
	{"cuTexRefSetMipmappedArray", (void *)cuTexRefSetMipmappedArray},
	{"cuThreadExchangeStreamCaptureMode", (void *)cuThreadExchangeStreamCaptureMode},
	{"cuUserObjectCreate", (void *)cuUserObjectCreate},
	{"cuUserObjectRelease", (void *)cuUserObjectRelease},
	{"cuUserObjectRetain", (void *)cuUserObjectRetain},
	{"cuWaitExternalSemaphoresAsync", (void *)cuWaitExternalSemaphoresAsync},
	{0, 0},
};
