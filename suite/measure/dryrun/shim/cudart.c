/* mpsuite's GPU dry run (suite/measure/dryrun): the CUDA runtime calls torch makes to count, select
   and describe devices, answered for one pretended GPU, loaded with LD_PRELOAD into the dry run's
   child process only. c10 then counts one device (the autograd engine accepts cuda:0 tensors, so
   backward runs on fake tensors) and SDPA can read the device's properties. Nothing is allocated or
   launched: the dry run's tensors are fake. The GPU comes from MPSUITE_DRYRUN_GPU, which the suite
   sets itself: "name;major;minor;sms;l2_mb;memory_gb". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

static void fake_gpu(struct cudaDeviceProp* p) {
  char name[256] = "NVIDIA H100 80GB HBM3";
  int major = 9, minor = 0, sms = 132, l2_mb = 50, mem_gb = 80;
  const char* spec = getenv("MPSUITE_DRYRUN_GPU");
  if (spec) sscanf(spec, "%255[^;];%d;%d;%d;%d;%d", name, &major, &minor, &sms, &l2_mb, &mem_gb);
  memset(p, 0, sizeof *p);
  strncpy(p->name, name, sizeof p->name - 1);
  p->major = major; p->minor = minor; p->multiProcessorCount = sms;
  p->l2CacheSize = l2_mb << 20; p->totalGlobalMem = (size_t)mem_gb << 30;
  p->warpSize = 32; p->maxThreadsPerBlock = 1024; p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerBlock = 49152; p->sharedMemPerBlockOptin = major >= 9 ? 232448 : 166912;
  p->sharedMemPerMultiprocessor = major >= 9 ? 233472 : 167936;
  p->regsPerBlock = 65536; p->regsPerMultiprocessor = 65536; p->memoryBusWidth = 5120;
  p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
  p->concurrentKernels = 1; p->unifiedAddressing = 1; p->managedMemory = 1;
}

cudaError_t cudaGetDeviceCount(int* count) { *count = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int* device) { *device = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* p, int device) {
  fake_gpu(p);
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
/* the optimizer's and dynamo's stream-capture checks: nothing is ever captured */
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* st) {
  *st = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus* st, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** deps,
                                     const cudaGraphEdgeData** edges, size_t* n) {
  if (st) *st = cudaStreamCaptureStatusNone;
  if (id) *id = 0;
  if (graph) *graph = 0;
  if (deps) *deps = 0;
  if (edges) *edges = 0;
  if (n) *n = 0;
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
