"""The MPI shared-memory files a stopped job leaves are removed, and nothing else
(lifecycle/shm_leftovers.py): in a folder standing for /dev/shm and a /proc of hand-written maps."""

from __future__ import annotations

import os
from pathlib import Path

from lifecycle import shm_leftovers


def _maps(proc: Path, pid: int, *paths: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    lines = [f"7f00000{i}000-7f00000{i}fff rw-s 00000000 00:1a 123{i}                      {p}"
             for i, p in enumerate(paths)]
    (proc / str(pid) / "maps").write_text("\n".join(lines + ["7ffd000-7ffe000 rw-p 00000000 00:00 0  [stack]"]) + "\n")


def test_the_files_a_job_made_and_nobody_maps_are_removed_the_others_kept(tmp_path):
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    proc.mkdir()
    (shm / "mpich_shm_1a2b_0").write_bytes(b"x")  # there before the job
    earlier = shm_leftovers.before(str(shm))
    assert earlier == {"mpich_shm_1a2b_0"}
    for name in ("mpich_shm_3c4d_0", "mpich_shm_5e6f_0", "ucx_shm_posix_77aa", "sem.other_program", "mine.txt"):
        (shm / name).write_bytes(b"x")
    _maps(proc, 4242, str(shm / "mpich_shm_5e6f_0"))  # another job's rank still maps it
    removed = shm_leftovers.remove_left(earlier, str(shm), str(proc), settle_s=0.0)
    assert removed == ["mpich_shm_3c4d_0", "ucx_shm_posix_77aa"]
    assert sorted(os.listdir(shm)) == ["mine.txt", "mpich_shm_1a2b_0", "mpich_shm_5e6f_0", "sem.other_program"]


def test_a_file_still_mapped_is_waited_for_then_left(tmp_path):
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    proc.mkdir()
    earlier = shm_leftovers.before(str(shm))
    (shm / "mpich_shm_9_0").write_bytes(b"x")
    _maps(proc, 17, str(shm / "mpich_shm_9_0"))
    assert shm_leftovers.remove_left(earlier, str(shm), str(proc), settle_s=0.1) == []
    assert (shm / "mpich_shm_9_0").exists()


def test_nothing_new_reads_no_process_and_a_missing_folder_is_no_error(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    earlier = shm_leftovers.before(str(shm))
    assert shm_leftovers.remove_left(earlier, str(shm), str(tmp_path / "no-proc")) == []
    assert shm_leftovers.before(str(tmp_path / "absent")) == frozenset()
    assert shm_leftovers.remove_left(frozenset(), str(tmp_path / "absent")) == []


def test_without_a_readable_proc_every_new_file_counts_as_in_use(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "mpich_shm_1_0").write_bytes(b"x")
    assert shm_leftovers.remove_left(frozenset(), str(shm), str(tmp_path / "no-proc"), settle_s=0.0) == []
    assert (shm / "mpich_shm_1_0").exists()


def test_an_orphaned_rank_removes_the_mpi_files_it_maps_and_only_those(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    for name in ("mpich_shm_aa_0", "mpich_shm_bb_0", "other_segment"):
        (shm / name).write_bytes(b"x")
    maps = tmp_path / "maps"
    maps.write_text("\n".join([
        f"7f0000-7f1000 rw-s 00000000 00:1a 1 {shm / 'mpich_shm_aa_0'}",
        f"7f1000-7f2000 rw-s 00000000 00:1a 2 {shm / 'other_segment'}",
        f"7f2000-7f3000 rw-s 00000000 00:1a 3 {shm / 'mpich_shm_gone_0'} (deleted)",
        "7f3000-7f4000 r-xp 00000000 08:01 4 /usr/lib/libc.so.6",
        "7ffd000-7ffe000 rw-p 00000000 00:00 0",
    ]) + "\n")
    assert shm_leftovers.remove_own(str(shm), str(maps)) == ["mpich_shm_aa_0"]
    assert sorted(os.listdir(shm)) == ["mpich_shm_bb_0", "other_segment"]
    assert shm_leftovers.remove_own(str(shm), str(tmp_path / "no-maps")) == []
