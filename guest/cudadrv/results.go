package cudadrv

// The CUresult enum, taken from of NVIDIA's cuda.h (CUDA 12.4, the
// driver API reference's "Data types used by CUDA driver"); the names and
// numbers are the documented ones. Strings are what the driver's
// cuGetErrorString answers for the common codes; the rest are the name in words.

// The CUresult values.
const (
	Success                         Result = 0   // CUDA_SUCCESS
	ErrInvalidValue                 Result = 1   // CUDA_ERROR_INVALID_VALUE
	ErrOutOfMemory                  Result = 2   // CUDA_ERROR_OUT_OF_MEMORY
	ErrNotInitialized               Result = 3   // CUDA_ERROR_NOT_INITIALIZED
	ErrDeinitialized                Result = 4   // CUDA_ERROR_DEINITIALIZED
	ErrProfilerDisabled             Result = 5   // CUDA_ERROR_PROFILER_DISABLED
	ErrProfilerNotInitialized       Result = 6   // CUDA_ERROR_PROFILER_NOT_INITIALIZED
	ErrProfilerAlreadyStarted       Result = 7   // CUDA_ERROR_PROFILER_ALREADY_STARTED
	ErrProfilerAlreadyStopped       Result = 8   // CUDA_ERROR_PROFILER_ALREADY_STOPPED
	ErrStubLibrary                  Result = 34  // CUDA_ERROR_STUB_LIBRARY
	ErrDeviceUnavailable            Result = 46  // CUDA_ERROR_DEVICE_UNAVAILABLE
	ErrNoDevice                     Result = 100 // CUDA_ERROR_NO_DEVICE
	ErrInvalidDevice                Result = 101 // CUDA_ERROR_INVALID_DEVICE
	ErrDeviceNotLicensed            Result = 102 // CUDA_ERROR_DEVICE_NOT_LICENSED
	ErrInvalidImage                 Result = 200 // CUDA_ERROR_INVALID_IMAGE
	ErrInvalidContext               Result = 201 // CUDA_ERROR_INVALID_CONTEXT
	ErrContextAlreadyCurrent        Result = 202 // CUDA_ERROR_CONTEXT_ALREADY_CURRENT
	ErrMapFailed                    Result = 205 // CUDA_ERROR_MAP_FAILED
	ErrUnmapFailed                  Result = 206 // CUDA_ERROR_UNMAP_FAILED
	ErrArrayIsMapped                Result = 207 // CUDA_ERROR_ARRAY_IS_MAPPED
	ErrAlreadyMapped                Result = 208 // CUDA_ERROR_ALREADY_MAPPED
	ErrNoBinaryForGPU               Result = 209 // CUDA_ERROR_NO_BINARY_FOR_GPU
	ErrAlreadyAcquired              Result = 210 // CUDA_ERROR_ALREADY_ACQUIRED
	ErrNotMapped                    Result = 211 // CUDA_ERROR_NOT_MAPPED
	ErrNotMappedAsArray             Result = 212 // CUDA_ERROR_NOT_MAPPED_AS_ARRAY
	ErrNotMappedAsPointer           Result = 213 // CUDA_ERROR_NOT_MAPPED_AS_POINTER
	ErrEccUncorrectable             Result = 214 // CUDA_ERROR_ECC_UNCORRECTABLE
	ErrUnsupportedLimit             Result = 215 // CUDA_ERROR_UNSUPPORTED_LIMIT
	ErrContextAlreadyInUse          Result = 216 // CUDA_ERROR_CONTEXT_ALREADY_IN_USE
	ErrPeerAccessUnsupported        Result = 217 // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
	ErrInvalidPTX                   Result = 218 // CUDA_ERROR_INVALID_PTX
	ErrInvalidGraphicsContext       Result = 219 // CUDA_ERROR_INVALID_GRAPHICS_CONTEXT
	ErrNvlinkUncorrectable          Result = 220 // CUDA_ERROR_NVLINK_UNCORRECTABLE
	ErrJITCompilerNotFound          Result = 221 // CUDA_ERROR_JIT_COMPILER_NOT_FOUND
	ErrUnsupportedPTXVersion        Result = 222 // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
	ErrJITCompilationDisabled       Result = 223 // CUDA_ERROR_JIT_COMPILATION_DISABLED
	ErrUnsupportedExecAffinity      Result = 224 // CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY
	ErrUnsupportedDevsideSync       Result = 225 // CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC
	ErrInvalidSource                Result = 300 // CUDA_ERROR_INVALID_SOURCE
	ErrFileNotFound                 Result = 301 // CUDA_ERROR_FILE_NOT_FOUND
	ErrSharedObjectSymbolNotFound   Result = 302 // CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND
	ErrSharedObjectInitFailed       Result = 303 // CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
	ErrOperatingSystem              Result = 304 // CUDA_ERROR_OPERATING_SYSTEM
	ErrInvalidHandle                Result = 400 // CUDA_ERROR_INVALID_HANDLE
	ErrIllegalState                 Result = 401 // CUDA_ERROR_ILLEGAL_STATE
	ErrLossyQuery                   Result = 402 // CUDA_ERROR_LOSSY_QUERY
	ErrNotFound                     Result = 500 // CUDA_ERROR_NOT_FOUND
	ErrNotReady                     Result = 600 // CUDA_ERROR_NOT_READY
	ErrIllegalAddress               Result = 700 // CUDA_ERROR_ILLEGAL_ADDRESS
	ErrLaunchOutOfResources         Result = 701 // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
	ErrLaunchTimeout                Result = 702 // CUDA_ERROR_LAUNCH_TIMEOUT
	ErrLaunchIncompatibleTexturing  Result = 703 // CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING
	ErrPeerAccessAlreadyEnabled     Result = 704 // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
	ErrPeerAccessNotEnabled         Result = 705 // CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
	ErrPrimaryContextActive         Result = 708 // CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
	ErrContextIsDestroyed           Result = 709 // CUDA_ERROR_CONTEXT_IS_DESTROYED
	ErrAssert                       Result = 710 // CUDA_ERROR_ASSERT
	ErrTooManyPeers                 Result = 711 // CUDA_ERROR_TOO_MANY_PEERS
	ErrHostMemoryAlreadyRegistered  Result = 712 // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
	ErrHostMemoryNotRegistered      Result = 713 // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
	ErrHardwareStackError           Result = 714 // CUDA_ERROR_HARDWARE_STACK_ERROR
	ErrIllegalInstruction           Result = 715 // CUDA_ERROR_ILLEGAL_INSTRUCTION
	ErrMisalignedAddress            Result = 716 // CUDA_ERROR_MISALIGNED_ADDRESS
	ErrInvalidAddressSpace          Result = 717 // CUDA_ERROR_INVALID_ADDRESS_SPACE
	ErrInvalidPc                    Result = 718 // CUDA_ERROR_INVALID_PC
	ErrLaunchFailed                 Result = 719 // CUDA_ERROR_LAUNCH_FAILED
	ErrCooperativeLaunchTooLarge    Result = 720 // CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
	ErrNotPermitted                 Result = 800 // CUDA_ERROR_NOT_PERMITTED
	ErrNotSupported                 Result = 801 // CUDA_ERROR_NOT_SUPPORTED
	ErrSystemNotReady               Result = 802 // CUDA_ERROR_SYSTEM_NOT_READY
	ErrSystemDriverMismatch         Result = 803 // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
	ErrCompatNotSupportedOnDevice   Result = 804 // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
	ErrMpsConnectionFailed          Result = 805 // CUDA_ERROR_MPS_CONNECTION_FAILED
	ErrMpsRpcFailure                Result = 806 // CUDA_ERROR_MPS_RPC_FAILURE
	ErrMpsServerNotReady            Result = 807 // CUDA_ERROR_MPS_SERVER_NOT_READY
	ErrMpsMaxClientsReached         Result = 808 // CUDA_ERROR_MPS_MAX_CLIENTS_REACHED
	ErrMpsMaxConnectionsReached     Result = 809 // CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED
	ErrMpsClientTerminated          Result = 810 // CUDA_ERROR_MPS_CLIENT_TERMINATED
	ErrCdpNotSupported              Result = 811 // CUDA_ERROR_CDP_NOT_SUPPORTED
	ErrCdpVersionMismatch           Result = 812 // CUDA_ERROR_CDP_VERSION_MISMATCH
	ErrStreamCaptureUnsupported     Result = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	ErrStreamCaptureInvalidated     Result = 901 // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	ErrStreamCaptureMerge           Result = 902 // CUDA_ERROR_STREAM_CAPTURE_MERGE
	ErrStreamCaptureUnmatched       Result = 903 // CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
	ErrStreamCaptureUnjoined        Result = 904 // CUDA_ERROR_STREAM_CAPTURE_UNJOINED
	ErrStreamCaptureIsolation       Result = 905 // CUDA_ERROR_STREAM_CAPTURE_ISOLATION
	ErrStreamCaptureImplicit        Result = 906 // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
	ErrCapturedEvent                Result = 907 // CUDA_ERROR_CAPTURED_EVENT
	ErrStreamCaptureWrongThread     Result = 908 // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
	ErrTimeout                      Result = 909 // CUDA_ERROR_TIMEOUT
	ErrGraphExecUpdateFailure       Result = 910 // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
	ErrExternalDevice               Result = 911 // CUDA_ERROR_EXTERNAL_DEVICE
	ErrInvalidClusterSize           Result = 912 // CUDA_ERROR_INVALID_CLUSTER_SIZE
	ErrFunctionNotLoaded            Result = 913 // CUDA_ERROR_FUNCTION_NOT_LOADED
	ErrInvalidResourceType          Result = 914 // CUDA_ERROR_INVALID_RESOURCE_TYPE
	ErrInvalidResourceConfiguration Result = 915 // CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION
	ErrUnknown                      Result = 999 // CUDA_ERROR_UNKNOWN
)

var results = map[Result]struct{ name, text string }{
	Success:                         {"CUDA_SUCCESS", "no error"},
	ErrInvalidValue:                 {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	ErrOutOfMemory:                  {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	ErrNotInitialized:               {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	ErrDeinitialized:                {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	ErrProfilerDisabled:             {"CUDA_ERROR_PROFILER_DISABLED", "profiler disabled"},
	ErrProfilerNotInitialized:       {"CUDA_ERROR_PROFILER_NOT_INITIALIZED", "profiler not initialized"},
	ErrProfilerAlreadyStarted:       {"CUDA_ERROR_PROFILER_ALREADY_STARTED", "profiler already started"},
	ErrProfilerAlreadyStopped:       {"CUDA_ERROR_PROFILER_ALREADY_STOPPED", "profiler already stopped"},
	ErrStubLibrary:                  {"CUDA_ERROR_STUB_LIBRARY", "stub library"},
	ErrDeviceUnavailable:            {"CUDA_ERROR_DEVICE_UNAVAILABLE", "device unavailable"},
	ErrNoDevice:                     {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	ErrInvalidDevice:                {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	ErrDeviceNotLicensed:            {"CUDA_ERROR_DEVICE_NOT_LICENSED", "device not licensed"},
	ErrInvalidImage:                 {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	ErrInvalidContext:               {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	ErrContextAlreadyCurrent:        {"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
	ErrMapFailed:                    {"CUDA_ERROR_MAP_FAILED", "map failed"},
	ErrUnmapFailed:                  {"CUDA_ERROR_UNMAP_FAILED", "unmap failed"},
	ErrArrayIsMapped:                {"CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
	ErrAlreadyMapped:                {"CUDA_ERROR_ALREADY_MAPPED", "already mapped"},
	ErrNoBinaryForGPU:               {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	ErrAlreadyAcquired:              {"CUDA_ERROR_ALREADY_ACQUIRED", "already acquired"},
	ErrNotMapped:                    {"CUDA_ERROR_NOT_MAPPED", "not mapped"},
	ErrNotMappedAsArray:             {"CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "not mapped as array"},
	ErrNotMappedAsPointer:           {"CUDA_ERROR_NOT_MAPPED_AS_POINTER", "not mapped as pointer"},
	ErrEccUncorrectable:             {"CUDA_ERROR_ECC_UNCORRECTABLE", "ecc uncorrectable"},
	ErrUnsupportedLimit:             {"CUDA_ERROR_UNSUPPORTED_LIMIT", "unsupported limit"},
	ErrContextAlreadyInUse:          {"CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "context already in use"},
	ErrPeerAccessUnsupported:        {"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access unsupported"},
	ErrInvalidPTX:                   {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	ErrInvalidGraphicsContext:       {"CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid graphics context"},
	ErrNvlinkUncorrectable:          {"CUDA_ERROR_NVLINK_UNCORRECTABLE", "nvlink uncorrectable"},
	ErrJITCompilerNotFound:          {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "jit compiler not found"},
	ErrUnsupportedPTXVersion:        {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "unsupported ptx version"},
	ErrJITCompilationDisabled:       {"CUDA_ERROR_JIT_COMPILATION_DISABLED", "jit compilation disabled"},
	ErrUnsupportedExecAffinity:      {"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "unsupported exec affinity"},
	ErrUnsupportedDevsideSync:       {"CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "unsupported devside sync"},
	ErrInvalidSource:                {"CUDA_ERROR_INVALID_SOURCE", "invalid source"},
	ErrFileNotFound:                 {"CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	ErrSharedObjectSymbolNotFound:   {"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
	ErrSharedObjectInitFailed:       {"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object init failed"},
	ErrOperatingSystem:              {"CUDA_ERROR_OPERATING_SYSTEM", "operating system"},
	ErrInvalidHandle:                {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	ErrIllegalState:                 {"CUDA_ERROR_ILLEGAL_STATE", "illegal state"},
	ErrLossyQuery:                   {"CUDA_ERROR_LOSSY_QUERY", "lossy query"},
	ErrNotFound:                     {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	ErrNotReady:                     {"CUDA_ERROR_NOT_READY", "device not ready"},
	ErrIllegalAddress:               {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	ErrLaunchOutOfResources:         {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	ErrLaunchTimeout:                {"CUDA_ERROR_LAUNCH_TIMEOUT", "launch timeout"},
	ErrLaunchIncompatibleTexturing:  {"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch incompatible texturing"},
	ErrPeerAccessAlreadyEnabled:     {"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access already enabled"},
	ErrPeerAccessNotEnabled:         {"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access not enabled"},
	ErrPrimaryContextActive:         {"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "primary context active"},
	ErrContextIsDestroyed:           {"CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	ErrAssert:                       {"CUDA_ERROR_ASSERT", "assert"},
	ErrTooManyPeers:                 {"CUDA_ERROR_TOO_MANY_PEERS", "too many peers"},
	ErrHostMemoryAlreadyRegistered:  {"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "host memory already registered"},
	ErrHostMemoryNotRegistered:      {"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "host memory not registered"},
	ErrHardwareStackError:           {"CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	ErrIllegalInstruction:           {"CUDA_ERROR_ILLEGAL_INSTRUCTION", "illegal instruction"},
	ErrMisalignedAddress:            {"CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	ErrInvalidAddressSpace:          {"CUDA_ERROR_INVALID_ADDRESS_SPACE", "invalid address space"},
	ErrInvalidPc:                    {"CUDA_ERROR_INVALID_PC", "invalid pc"},
	ErrLaunchFailed:                 {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	ErrCooperativeLaunchTooLarge:    {"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "cooperative launch too large"},
	ErrNotPermitted:                 {"CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	ErrNotSupported:                 {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	ErrSystemNotReady:               {"CUDA_ERROR_SYSTEM_NOT_READY", "system not ready"},
	ErrSystemDriverMismatch:         {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system driver mismatch"},
	ErrCompatNotSupportedOnDevice:   {"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "compat not supported on device"},
	ErrMpsConnectionFailed:          {"CUDA_ERROR_MPS_CONNECTION_FAILED", "mps connection failed"},
	ErrMpsRpcFailure:                {"CUDA_ERROR_MPS_RPC_FAILURE", "mps rpc failure"},
	ErrMpsServerNotReady:            {"CUDA_ERROR_MPS_SERVER_NOT_READY", "mps server not ready"},
	ErrMpsMaxClientsReached:         {"CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "mps max clients reached"},
	ErrMpsMaxConnectionsReached:     {"CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "mps max connections reached"},
	ErrMpsClientTerminated:          {"CUDA_ERROR_MPS_CLIENT_TERMINATED", "mps client terminated"},
	ErrCdpNotSupported:              {"CUDA_ERROR_CDP_NOT_SUPPORTED", "cdp not supported"},
	ErrCdpVersionMismatch:           {"CUDA_ERROR_CDP_VERSION_MISMATCH", "cdp version mismatch"},
	ErrStreamCaptureUnsupported:     {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "stream capture unsupported"},
	ErrStreamCaptureInvalidated:     {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "stream capture invalidated"},
	ErrStreamCaptureMerge:           {"CUDA_ERROR_STREAM_CAPTURE_MERGE", "stream capture merge"},
	ErrStreamCaptureUnmatched:       {"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "stream capture unmatched"},
	ErrStreamCaptureUnjoined:        {"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "stream capture unjoined"},
	ErrStreamCaptureIsolation:       {"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "stream capture isolation"},
	ErrStreamCaptureImplicit:        {"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "stream capture implicit"},
	ErrCapturedEvent:                {"CUDA_ERROR_CAPTURED_EVENT", "captured event"},
	ErrStreamCaptureWrongThread:     {"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "stream capture wrong thread"},
	ErrTimeout:                      {"CUDA_ERROR_TIMEOUT", "timeout"},
	ErrGraphExecUpdateFailure:       {"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "graph exec update failure"},
	ErrExternalDevice:               {"CUDA_ERROR_EXTERNAL_DEVICE", "external device"},
	ErrInvalidClusterSize:           {"CUDA_ERROR_INVALID_CLUSTER_SIZE", "invalid cluster size"},
	ErrFunctionNotLoaded:            {"CUDA_ERROR_FUNCTION_NOT_LOADED", "function not loaded"},
	ErrInvalidResourceType:          {"CUDA_ERROR_INVALID_RESOURCE_TYPE", "invalid resource type"},
	ErrInvalidResourceConfiguration: {"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "invalid resource configuration"},
	ErrUnknown:                      {"CUDA_ERROR_UNKNOWN", "unknown error"},
}
