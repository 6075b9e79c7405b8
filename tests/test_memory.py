import numpy as np

from app.serving.memory import resident_bytes, trim_if_over


def test_trimming_gives_freed_pages_back():
    blocks = [np.ones(1 << 13) for _ in range(8000)]  # 512 MB in 64 kB blocks, below glibc's mmap threshold
    del blocks[::2]  # freed but fragmented: the heap cannot shrink from the top
    before = resident_bytes()
    trim_if_over(before * 2)
    assert resident_bytes() > before - (50 << 20)  # under the limit nothing is given back
    trim_if_over(0)
    assert resident_bytes() < before - (200 << 20)
