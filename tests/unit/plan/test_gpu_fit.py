"""GpuFit: the one answer to "which GPUs can run this cell", and its ranges as CEL writes them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from imagekit.plan.gpu_fit import Kernels, gpu_fit


def test_ranges_join_what_meets_and_end_where_no_kernel_serves() -> None:
    cu118 = Kernels.of("3.7;5.0;6.0;7.0;7.5;8.0;8.6;9.0")
    assert cu118.ranges() == (((3, 7), (4, 0)), ((5, 0), (10, 0)))
    assert Kernels.of("7.5;8.0;8.6;9.0;10.0;12.0+PTX").ranges() == (((7, 5), (11, 0)), ((12, 0), None))
    assert Kernels.of("8.0;8.6+PTX").ranges() == (((8, 0), None),)  # PTX inside a cubin's major
    assert Kernels.of("8.6").ranges() == (((8, 6), (9, 0)),)  # sm_86 does not serve an 8.0 GPU


capabilities = st.tuples(st.integers(3, 13), st.integers(0, 9))
lists = st.lists(st.tuples(capabilities, st.booleans()), min_size=1, max_size=8)


@given(lists, capabilities)
def test_the_ranges_serve_exactly_what_the_kernels_serve(
    items: list[tuple[tuple[int, int], bool]], gpu: tuple[int, int]
) -> None:
    arch_list = ";".join(f"{major}.{minor}{'+PTX' if ptx else ''}" for (major, minor), ptx in items)
    kernels = Kernels.of(arch_list)
    in_a_range = any(low <= gpu and (below is None or gpu < below) for low, below in kernels.ranges())
    assert in_a_range == kernels.serve(gpu)


def test_the_fit_of_a_cell() -> None:
    cu121 = gpu_fit("linux/amd64", "12.1", "2.5.1")
    assert (cu121.platform.arch, cu121.gpu, cu121.driver_floor) == ("amd64", True, "525.60.13")
    assert cu121.runs_on((8, 9)) and not cu121.runs_on((10, 0))
    grace = gpu_fit("linux/arm64", "12.6", "2.14.1")
    assert grace.runs_on((8, 6)) and not grace.runs_on((10, 0))
    cpu = gpu_fit("linux/amd64", "cpu", "2.5.1")
    assert (cpu.gpu, cpu.driver_floor, cpu.kernels) == (False, None, None) and not cpu.runs_on((9, 0))
    stack = gpu_fit("linux/amd64", "12.1", "2.1.0a0", known_list=False)  # NGC: its own build
    assert stack.kernels is None and stack.driver_floor == "525.60.13" and not stack.runs_on((9, 0))
