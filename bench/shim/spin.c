/* Busy for a given number of nanoseconds: an NVML call's cost as the driver spends it (on a CPU,
 * in the kernel), called through ctypes, which lets the interpreter go for the call as it does for
 * libnvidia-ml. Built by bench/nvml_standin.py with the host's C compiler. */
#include <time.h>

void vgpumon_spin_ns(long ns) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < ns);
}
