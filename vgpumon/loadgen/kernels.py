"""CUDA C++ source of the load kernels, compiled at run time with NVRTC.

No headers are included (the user's machine has no CUDA toolkit); special registers and tensor
instructions are reached through inline PTX. Every kernel spins until its own block has counted
``cycles`` SM clock cycles, so a launch is busy for an exact, known time at a known clock, and
block 0 thread 0 writes what it measured into a timing slot: [0] cycles counted,
[1] ``%globaltimer`` nanoseconds elapsed. The host turns those into the current SM clock and the
achieved busy time.
"""

from __future__ import annotations

TIMING_SLOT_WORDS = 4
"""u64 words per timing slot: cycles, nanoseconds, a sink word the tensor kernel writes only when
its result is impossible (which keeps the compiler from dropping the work), one spare."""

KERNEL_NAMES = {"spin": "vg_spin", "tensor": "vg_tensor", "stream": "vg_stream"}

MIN_TENSOR_CC = (8, 0)
"""mma.sync.m16n8k16 with f16 inputs and f32 accumulators is an sm_80 instruction."""

_COMMON_SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;

__device__ __forceinline__ u64 vg_clock() {
    u64 t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    return t;
}

__device__ __forceinline__ u64 vg_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void vg_record(u64* timing, u64 c0, u64 t0) {
    if (timing != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
        u64 c1 = vg_clock();
        u64 t1 = vg_ns();
        timing[0] = c1 - c0;
        timing[1] = t1 - t0;
    }
}

/* SM busy, nothing else: one resident warp per block spinning on the cycle counter. */
extern "C" __global__ void vg_spin(u64 cycles, u64* timing) {
    u64 t0 = vg_ns();
    u64 c0 = vg_clock();
    while (vg_clock() - c0 < cycles) {
    }
    vg_record(timing, c0, t0);
}

"""

_TENSOR_SOURCE = r"""
/* Tensor cores: four independent chains of m16n8k16 f16 x f16 -> f32 MMAs per warp. */
extern "C" __global__ void vg_tensor(u64 cycles, u64* timing) {
    u64 t0 = vg_ns();
    u64 c0 = vg_clock();
    u32 a0 = 0x14001400u ^ (threadIdx.x & 7u);
    u32 a1 = 0x14001400u;
    u32 a2 = 0x14001400u ^ (blockIdx.x & 7u);
    u32 a3 = 0x14001400u;
    u32 b0 = 0x14001400u;
    u32 b1 = 0x14001400u ^ (threadIdx.x & 3u);
    float d[4][4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
        for (int j = 0; j < 4; ++j) d[c][j] = 0.0f;
    }
    do {
#pragma unroll
        for (int r = 0; r < 8; ++r) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                asm volatile(
                    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                    : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            }
        }
    } while (vg_clock() - c0 < cycles);
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
        for (int j = 0; j < 4; ++j) s += d[c][j];
    }
    if (s < 0.0f && timing != 0) timing[2] = 1;
    vg_record(timing, c0, t0);
}
"""

_STREAM_SOURCE = r"""
/* DRAM traffic: read-modify-write 16-byte words of the buffer, four loads in flight per thread. */
extern "C" __global__ void vg_stream(u64 cycles, u64* timing, uint4* buf, u64 n) {
    u64 t0 = vg_ns();
    u64 c0 = vg_clock();
    u64 stride = (u64)gridDim.x * blockDim.x;
    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 i = tid;
    do {
        if (i + 3 * stride >= n) i = tid;
        uint4 v0 = buf[i];
        uint4 v1 = buf[i + stride];
        uint4 v2 = buf[i + 2 * stride];
        uint4 v3 = buf[i + 3 * stride];
        v0.x ^= 1u;
        v1.x ^= 1u;
        v2.x ^= 1u;
        v3.x ^= 1u;
        buf[i] = v0;
        buf[i + stride] = v1;
        buf[i + 2 * stride] = v2;
        buf[i + 3 * stride] = v3;
        i += 4 * stride;
    } while (vg_clock() - c0 < cycles);
    vg_record(timing, c0, t0);
}
"""


def kernels_for(compute_capability: tuple[int, int]) -> tuple[str, ...]:
    """The kernel kinds this device can run (tensor needs sm_80 or newer)."""
    if compute_capability >= MIN_TENSOR_CC:
        return ("spin", "tensor", "stream")
    return ("spin", "stream")


def source_for(compute_capability: tuple[int, int]) -> str:
    """One translation unit with every kernel the device supports (one NVRTC compile)."""
    parts = [_COMMON_SOURCE, _STREAM_SOURCE]
    if "tensor" in kernels_for(compute_capability):
        parts.append(_TENSOR_SOURCE)
    return "\n".join(parts)
