
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
typedef CUresult (*f_init)(unsigned int);
typedef CUresult (*f_dev)(CUdevice *, int);
typedef CUresult (*f_retain)(CUcontext *, CUdevice);
typedef CUresult (*f_set)(CUcontext);
typedef CUresult (*f_info)(size_t *, size_t *);
typedef CUresult (*f_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*f_name)(CUresult, const char **);
int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen libcuda failed\n"); return 3; }
    f_init init = (f_init)dlsym(h, "cuInit"); f_dev dev = (f_dev)dlsym(h, "cuDeviceGet");
    f_retain retain = (f_retain)dlsym(h, "cuDevicePrimaryCtxRetain"); f_set set = (f_set)dlsym(h, "cuCtxSetCurrent");
    f_info info = (f_info)dlsym(h, "cuMemGetInfo_v2"); f_alloc alloc = (f_alloc)dlsym(h, "cuMemAlloc_v2");
    f_name name = (f_name)dlsym(h, "cuGetErrorName");
    CUdevice d; CUcontext c; CUdeviceptr p; const char *n = "?";
    double need = atof(getenv("NEED_GIB") ? getenv("NEED_GIB") : "1");
    size_t total = 0, free_b = 0;
    if (init(0) || dev(&d, 0) || retain(&c, d) || set(c)) { fprintf(stderr, "context failed\n"); return 3; }
    info(&free_b, &total);
    printf("device memory: %.2f GiB total, %.2f GiB free; allocating %.1f GiB\n", total / 1073741824.0,
           free_b / 1073741824.0, need);
    for (int i = 0; i < (int)need; i++) {
        CUresult r = alloc(&p, (size_t)1 << 30);
        if (r != CUDA_SUCCESS) {
            name(r, &n);
            fprintf(stderr, "cuMemAlloc of block %d (1 GiB) failed: %s\n", i, n);
            return 1;
        }
    }
    printf("done\n");
    return 0;
}
