// dlopen: loads libcuda.so.1 the way loaders such as cuda-python's driver
// bindings do — dlopen, dlsym of cuGetProcAddress_v2 only, then every entry
// point by name — and prints, for each NAME or NAME@VERSION given (the
// CUDA version asked for; 12040 without one), what the lookup and (for
// entry points taking no handles) a call answer. It needs no cuda.h: the
// few types it uses are declared by hand. Built by main_test.go.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef CUresult (*getproc_t)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*init_t)(unsigned int);
typedef CUresult (*noargs_t)(void);

int main(int argc, char **argv) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	getproc_t getproc = (getproc_t)dlsym(lib, "cuGetProcAddress_v2");
	if (!getproc) {
		printf("no cuGetProcAddress_v2\n");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		void *fn = 0;
		int status = -1, version = 12040;
		char *at = strchr(argv[i], '@');
		if (at) {
			version = atoi(at + 1);
			*at = 0;
		}
		CUresult r = getproc(argv[i], &fn, version, 0, &status);
		void *direct = dlsym(lib, argv[i]);
		printf("%s@%d: result %d status %d found %d same-as-dlsym %d", argv[i], version, r, status, fn != 0,
		       direct != 0 && direct == fn);
		if (fn && argv[i][0] == 'c' && argv[i][2] == 'G' && argv[i][3] == 'r') { // cuGraph*: no handles needed to refuse
			printf(" call %d", ((noargs_t)fn)());
		}
		if (fn && !__builtin_strcmp(argv[i], "cuInit")) {
			printf(" call(1) %d", ((init_t)fn)(1));
		}
		printf("\n");
	}
	return 0;
}
