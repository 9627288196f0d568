// streams: four streams at once, each with buffers of its own, ordered
// against each other by events. Arguments: ITERS (default 10), PACE,
// milliseconds slept after each iteration (default 0) so a migration can
// land mid-run, N, floats per buffer (default 1<<18), and BALLAST, MiB of
// device memory allocated and filled (cuMemsetD32, a pattern per GiB) before
// the first iteration and kept to the end (default 0): a program holding
// that much while it works, whose migration moves it all; and CHURN, MiB
// of that ballast (from its start) rewritten every iteration, before the
// streams' work, with cuMemsetD32 (a pattern per iteration) (default 0):
// device memory changing at a steady rate with no host work, the dirty
// set of a migration's stop phase; at the end the CPU checks every word
// of it (the last iteration's pattern) and prints "streams: churn N MiB
// digest H" (FNV-1a over its bytes as copied back). Per iteration,
// for each stream s (in order): copy x_s, y_s and z_s to the device
// (cuMemcpyHtoDAsync), record start_s, launch scaleAdd(x_s, y_s, a_s) three
// times, record mid_s. Then for each stream s: wait for mid_(s+1 mod 4)
// (cuStreamWaitEvent: stream s reads stream s+1's y), launch
// scaleAdd(y_(s+1), z_s, b_s), record done_s, copy y_s and z_s back
// (cuMemcpyDtoHAsync). After every stream's cuStreamSynchronize the CPU,
// computing the same (a float multiply, then a float add), must agree to
// the bit. Lines: "streams: iter I stream S digest H" (FNV-1a over y_s,
// then z_s), "streams: iter I digest H" (over all four streams' bytes),
// "time: streams iter I stream S MS ms" (cuEventElapsedTime start_s to
// done_s: timing lines, not compared between runs), and at the end
// "streams: digest H" (over every iteration's digest) and "streams: ok",
// or "streams: FAIL ..." and status 1 (any CUDA error too, named).
// docs/cuda.md, "Programs".
//
// Build: gcc -O2 -I<dir of cuda.h> -o streams streams.c -lcuda
#include "cudaprog.h"

#if defined(__GNUC__) && !defined(__clang__)
// GCC would fuse the product and the sum where the target has FMA.
#pragma GCC optimize("fp-contract=off")
#endif

enum {
	NS = 4,     // streams
	REPEAT = 3, // scaleAdd launches per stream before the cross-stream step
};

struct lane {
	CUstream s;
	CUevent start, mid, done;
	CUdeviceptr x, y, z;
	float *hx, *hy, *hz, *wy, *wz; // host copies and the CPU's answers
	float a, b;
};

static void scale_add(const float *x, float *y, float a, int n) {
	for (int i = 0; i < n; i++) {
		float p = a * x[i];
		y[i] = p + y[i];
	}
}

static int compare(const float *got, const float *want, int n, int it, int s, const char *what) {
	int bad = 0;
	for (int i = 0; i < n; i++) {
		if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) {
			printf("streams: FAIL iter %d stream %d %s[%d] = %a, want %a\n", it, s, what, i, got[i], want[i]);
		}
	}
	return bad;
}

int main(int argc, char **argv) {
	prog = "streams";
	int iters = argc > 1 ? atoi(argv[1]) : 10;
	int pace = argc > 2 ? atoi(argv[2]) : 0;
	int n = argc > 3 ? atoi(argv[3]) : 1 << 18;
	long ballast = argc > 4 ? atol(argv[4]) : 0;
	long churn = argc > 5 ? atol(argv[5]) : 0;
	if (iters <= 0 || n <= 0 || ballast < 0 || churn < 0 || churn > ballast) {
		printf("streams: FAIL usage: streams [ITERS [PACE_MS [N [BALLAST_MIB [CHURN_MIB]]]]], ITERS and N > 0, CHURN_MIB <= BALLAST_MIB\n");
		return 2;
	}
	size_t bytes = (size_t)n * sizeof(float);
	CUmodule mod = setup();
	enum { MAXB = 1024 };
	CUdeviceptr bal[MAXB];
	size_t balmib[MAXB];
	int nbal = 0;
	for (long left = ballast; left > 0 && nbal < MAXB; nbal++) {
		size_t mib = left < 1024 ? (size_t)left : 1024;
		balmib[nbal] = mib;
		CHECK(cuMemAlloc(&bal[nbal], mib << 20));
		CHECK(cuMemsetD32(bal[nbal], 0x5a5a0000u + (unsigned)nbal, (mib << 20) / 4));
		left -= (long)mib;
	}
	if (ballast > 0)
		printf("streams: ballast %ld MiB in %d allocations\n", ballast, nbal);
	CUfunction fn;
	CHECK(cuModuleGetFunction(&fn, mod, "scaleAdd"));
	struct lane l[NS];
	for (int s = 0; s < NS; s++) {
		CHECK(cuStreamCreate(&l[s].s, CU_STREAM_NON_BLOCKING));
		CHECK(cuEventCreate(&l[s].start, CU_EVENT_DEFAULT));
		CHECK(cuEventCreate(&l[s].mid, CU_EVENT_DEFAULT));
		CHECK(cuEventCreate(&l[s].done, CU_EVENT_DEFAULT));
		CHECK(cuMemAlloc(&l[s].x, bytes));
		CHECK(cuMemAlloc(&l[s].y, bytes));
		CHECK(cuMemAlloc(&l[s].z, bytes));
		l[s].hx = malloc(bytes), l[s].hy = malloc(bytes), l[s].hz = malloc(bytes);
		l[s].wy = malloc(bytes), l[s].wz = malloc(bytes);
		if (!l[s].hx || !l[s].hy || !l[s].hz || !l[s].wy || !l[s].wz) {
			printf("streams: FAIL out of host memory\n");
			return 1;
		}
	}
	printf("streams: streams %d n %d\n", NS, n);
	uint64_t digest = fnv_init;
	int failed = 0;
	unsigned int grid = (n + 255) / 256;
	for (int it = 0; it < iters; it++) {
		long left = churn;
		for (int i = 0; i < nbal && left > 0; i++) {
			size_t mib = (size_t)left < balmib[i] ? (size_t)left : balmib[i];
			CHECK(cuMemsetD32(bal[i], 0xc0de0000u + (unsigned)it, (mib << 20) / 4));
			left -= (long)mib;
		}
		for (int s = 0; s < NS; s++) {
			struct lane *p = &l[s];
			uint32_t seed = 1000 + 16 * it + 4 * s;
			fill_floats(p->hx, n, seed);
			fill_floats(p->hy, n, seed + 1);
			fill_floats(p->hz, n, seed + 2);
			p->a = 0.75f + 0.125f * s + 0.0625f * (it % 8);
			p->b = -1.5f + 0.25f * s;
			memcpy(p->wy, p->hy, bytes);
			memcpy(p->wz, p->hz, bytes);
			for (int r = 0; r < REPEAT; r++) {
				scale_add(p->hx, p->wy, p->a, n);
			}
		}
		for (int s = 0; s < NS; s++) {
			scale_add(l[(s + 1) % NS].wy, l[s].wz, l[s].b, n);
		}
		for (int s = 0; s < NS; s++) {
			struct lane *p = &l[s];
			CHECK(cuMemcpyHtoDAsync(p->x, p->hx, bytes, p->s));
			CHECK(cuMemcpyHtoDAsync(p->y, p->hy, bytes, p->s));
			CHECK(cuMemcpyHtoDAsync(p->z, p->hz, bytes, p->s));
			CHECK(cuEventRecord(p->start, p->s));
			void *params[] = {&p->x, &p->y, &p->a, &n};
			for (int r = 0; r < REPEAT; r++) {
				CHECK(cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, p->s, params, 0));
			}
			CHECK(cuEventRecord(p->mid, p->s));
		}
		for (int s = 0; s < NS; s++) {
			struct lane *p = &l[s], *q = &l[(s + 1) % NS];
			CHECK(cuStreamWaitEvent(p->s, q->mid, 0));
			void *params[] = {&q->y, &p->z, &p->b, &n};
			CHECK(cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, p->s, params, 0));
			CHECK(cuEventRecord(p->done, p->s));
		}
		// Stream s-1's step reads y_s: stream s's copies back also wait
		// for it (done_(s-1)).
		for (int s = 0; s < NS; s++) {
			CHECK(cuStreamWaitEvent(l[s].s, l[(s + NS - 1) % NS].done, 0));
			CHECK(cuMemcpyDtoHAsync(l[s].hy, l[s].y, bytes, l[s].s));
			CHECK(cuMemcpyDtoHAsync(l[s].hz, l[s].z, bytes, l[s].s));
		}
		uint64_t all = fnv_init;
		for (int s = 0; s < NS; s++) {
			struct lane *p = &l[s];
			CHECK(cuStreamSynchronize(p->s));
			float ms = -1;
			CHECK(cuEventElapsedTime(&ms, p->start, p->done));
			int bad = compare(p->hy, p->wy, n, it, s, "y") + compare(p->hz, p->wz, n, it, s, "z");
			if (bad || ms < 0) {
				printf("streams: FAIL iter %d stream %d: %d elements differ, elapsed %f ms\n", it, s, bad, ms);
				failed = 1;
			}
			uint64_t h = fnv(fnv(fnv_init, p->hy, bytes), p->hz, bytes);
			all = fnv(fnv(all, p->hy, bytes), p->hz, bytes);
			printf("streams: iter %d stream %d digest %016llx\n", it, s, (unsigned long long)h);
			printf("time: streams iter %d stream %d %.3f ms\n", it, s, ms);
		}
		digest = fnv(digest, &all, sizeof all);
		printf("streams: iter %d digest %016llx\n", it, (unsigned long long)all);
		fflush(stdout);
		sleep_ms(pace);
	}
	for (int s = 0; s < NS; s++) {
		CHECK(cuMemFree(l[s].x));
		CHECK(cuMemFree(l[s].y));
		CHECK(cuMemFree(l[s].z));
		CHECK(cuEventDestroy(l[s].start));
		CHECK(cuEventDestroy(l[s].mid));
		CHECK(cuEventDestroy(l[s].done));
		CHECK(cuStreamDestroy(l[s].s));
	}
	if (churn > 0) {
		// The churned ballast as the GPU holds it: every word the last
		// iteration's pattern.
		enum { CHUNK = 16 << 20 };
		uint32_t *buf = malloc(CHUNK), want = 0xc0de0000u + (unsigned)(iters - 1);
		uint64_t h = fnv_init;
		long left = churn, bad = 0;
		if (!buf) {
			printf("streams: FAIL out of host memory\n");
			return 1;
		}
		for (int i = 0; i < nbal && left > 0; i++) {
			size_t n = ((size_t)left < balmib[i] ? (size_t)left : balmib[i]) << 20;
			for (size_t off = 0; off < n; off += CHUNK) {
				size_t k = n - off < CHUNK ? n - off : CHUNK;
				CHECK(cuMemcpyDtoH(buf, bal[i] + off, k));
				for (size_t w = 0; w < k / 4; w++) {
					if (buf[w] != want && bad++ == 0) {
						printf("streams: FAIL churn allocation %d word %zu = %08x, want %08x\n", i, off / 4 + w, buf[w], want);
					}
				}
				h = fnv(h, buf, k);
			}
			left -= (long)(n >> 20);
		}
		free(buf);
		if (bad) {
			failed = 1;
		}
		printf("streams: churn %ld MiB digest %016llx\n", churn, (unsigned long long)h);
	}
	for (int i = 0; i < nbal; i++)
		CHECK(cuMemFree(bal[i]));
	CHECK(cuModuleUnload(mod));
	printf("streams: digest %016llx\n", (unsigned long long)digest);
	printf("streams: %s\n", failed ? "FAIL" : "ok");
	return failed;
}
