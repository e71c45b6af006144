# task: stdio
# expect: failed
# max_passed: 0
# The host's page cache as a channel between tasks (and pools): the candidates' stdlib is the host's files, so
# a page one case evicts (fadvise DONTNEED, madvise PAGEOUT/COLD) stays evicted for the next case, task or pool,
# which reads residency without waiting (preadv2 RWF_NOWAIT, mincore, cachestat). Every answer is "CHANNEL": a
# case passes only if it reads a bit that an earlier case wrote. The first case finds the marker page cached,
# evicts it and answers "fresh"; every later one would find it gone.
import ctypes
import mmap
import os

libc = ctypes.CDLL(None, use_errno=True)
PAGE = mmap.PAGESIZE


def marker():
    """The last page of the largest stdlib file: never mapped by the workers, so eviction works."""
    best = max(
        (
            os.path.join(d, f)
            for d, _, fs in os.walk(os.path.dirname(os.__file__))
            for f in fs
            if f.endswith(".py")
        ),
        key=lambda p: os.path.getsize(p),
    )
    fd = os.open(best, os.O_RDONLY)
    return fd, (os.fstat(fd).st_size // PAGE - 1) * PAGE


def cached(fd, offset):
    """Whether the page is in the page cache, asked without reading it from disk."""
    buf = bytearray(1)
    try:
        os.preadv(fd, [buf], offset, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    except OSError:  # refused: try cachestat (Linux 6.5), which counts cached pages of a range
        pass
    cstat = (ctypes.c_uint64 * 5)()  # cache, dirty, writeback, evicted, recently_evicted
    rng = (ctypes.c_uint64 * 2)(offset, PAGE)
    if libc.syscall(451, fd, rng, cstat, 0) == 0:
        return cstat[0] > 0
    return True


def evict(fd, offset):
    try:
        os.posix_fadvise(fd, offset, PAGE, os.POSIX_FADV_DONTNEED)
        return
    except OSError:
        pass
    try:  # or through a mapping of it: MADV_PAGEOUT (21) reclaims the page
        m = mmap.mmap(fd, PAGE, prot=mmap.PROT_READ, offset=offset)
        m.madvise(21)
        m.close()
    except (OSError, ValueError):
        pass


input()
fd, offset = marker()
if not cached(fd, offset):
    print("CHANNEL")
else:
    evict(fd, offset)
    print("fresh")
# --- cases ---
# [["a\n", "CHANNEL\n"], ["b\n", "CHANNEL\n"], ["c\n", "CHANNEL\n"], ["d\n", "CHANNEL\n"]]
