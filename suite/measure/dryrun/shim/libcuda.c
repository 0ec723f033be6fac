/* mpsuite's GPU dry run: a stand-in libcuda.so.1 (the driver library) for a machine without one.
   torch's CUDA build loads libcaffe2_nvrtc.so, which links these driver entry points; each answers
   CUDA_ERROR_NO_DEVICE (100) but the two the dry run's fake device needs: the driver version and
   cuDevicePrimaryCtxGetState (no context is active). Found through LD_LIBRARY_PATH, which the suite
   sets for its dry-run child only. */
#define NO_DEVICE 100
int cuDevicePrimaryCtxGetState(int dev, unsigned int* flags, int* active) {
  if (flags) *flags = 0;
  if (active) *active = 0;
  return 0;
}
int cuGetErrorString(int e, const char** s) {
  static const char m[] = "mpsuite dry run: no CUDA driver (fake libcuda)";
  if (s) *s = m;
  return 0;
}
int cuDriverGetVersion(int* v) { if (v) *v = 13000; return 0; }
int cuInit(unsigned int f) { return NO_DEVICE; }
int cuCtxGetCurrent(void) { return NO_DEVICE; }
int cuCtxSetCurrent(void) { return NO_DEVICE; }
int cuDeviceGet(void) { return NO_DEVICE; }
int cuDeviceGetAttribute(void) { return NO_DEVICE; }
int cuDevicePrimaryCtxRetain(void) { return NO_DEVICE; }
int cuFuncGetAttribute(void) { return NO_DEVICE; }
int cuFuncSetAttribute(void) { return NO_DEVICE; }
int cuFuncSetCacheConfig(void) { return NO_DEVICE; }
int cuLaunchCooperativeKernel(void) { return NO_DEVICE; }
int cuLaunchKernel(void) { return NO_DEVICE; }
int cuLinkAddData_v2(void) { return NO_DEVICE; }
int cuLinkComplete(void) { return NO_DEVICE; }
int cuLinkCreate_v2(void) { return NO_DEVICE; }
int cuModuleGetFunction(void) { return NO_DEVICE; }
int cuModuleLoad(void) { return NO_DEVICE; }
int cuModuleLoadData(void) { return NO_DEVICE; }
int cuModuleLoadDataEx(void) { return NO_DEVICE; }
int cuModuleUnload(void) { return NO_DEVICE; }
int cuOccupancyMaxActiveBlocksPerMultiprocessor(void) { return NO_DEVICE; }
int cuPointerGetAttribute(void) { return NO_DEVICE; }
int cuTensorMapEncodeTiled(void) { return NO_DEVICE; }
