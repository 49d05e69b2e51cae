/* One-way latency between CPUs 0 and 1: a cache line bounced between two pinned threads.

   Tells which state a shared VM's two vCPUs are in (docs/cpu-performance.md, Benchmarks):
   about 50-170 ns where their cores share a cache, 250-700 ns where they do not.

   gcc -O2 -pthread benchmarks/core_latency.c -o core_latency && ./core_latency [rounds]
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic long flag __attribute__((aligned(64)));
static long rounds = 20000;

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *pong(void *arg) {
    (void)arg;
    pin(1);
    for (long i = 0; i < rounds; i++) {
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atol(argv[1]);
    if (rounds < 1) {
        fprintf(stderr, "rounds must be positive\n");
        return 2;
    }
    pin(0);
    atomic_store(&flag, 0);
    pthread_t thread;
    if (pthread_create(&thread, NULL, pong, NULL) != 0) {
        fprintf(stderr, "cannot start the second thread\n");
        return 1;
    }
    double start = now();
    for (long i = 0; i < rounds; i++) {
        atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {
        }
    }
    double elapsed = now() - start;
    pthread_join(thread, NULL);
    printf("%.0f\n", elapsed / rounds * 1e9 / 2);  /* ns one way */
    return 0;
}
