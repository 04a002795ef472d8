"""Time `mqbench brokers build-images` cold and warm on this machine, and the image sizes.

Cold means nothing of a previous build is reused: a fresh image cache (so debootstrap runs
and the wheels are fetched again, from pip's own cache when it has them) and a separate
repository prefix (``MQBENCH_IMAGE_REPOSITORY``), so the engine's build cache has no
parent to reuse and the images other work uses stay untouched. Then the same build again
(warm: every image up to date). The images it built are removed at the end (only those:
selected by their repository prefix). Needs root, an engine and the packages
``scripts/install.sh --dev`` installs.

    .venv/bin/python benchmarks/docker_images_build.py [TARGET ...]   # default: all
"""

from __future__ import annotations

import os
import sys
import tempfile
import time


def main(targets: list[str]) -> int:
    """Cold then warm build of ``targets``; prints one line per image and the totals."""
    prefix = f"mqbench-bench-{os.getpid()}"
    os.environ["MQBENCH_IMAGE_REPOSITORY"] = prefix
    with tempfile.TemporaryDirectory(prefix="mqbench-image-bench-") as cache:
        os.environ["MQBENCH_IMAGE_CACHE"] = cache
        from mqbench.brokers.docker.image_engine import SdkEngine, build_local_images

        built: list[str] = []
        try:
            for label in ("cold", "warm"):
                started = time.monotonic()
                results = build_local_images(targets)
                built = [r.ref for r in results]
                total = time.monotonic() - started
                for r in results:
                    size = r.size / 1e6
                    print(f"{label} {r.ref:50} {r.action:10} {r.seconds:7.1f} s {size:6.0f} MB")
                print(f"{label} total {total:.1f} s (load average {os.getloadavg()[0]:.1f})")
        finally:
            client = SdkEngine().client
            for ref in reversed(built):  # children before their parents
                if ref.startswith(f"{prefix}/"):
                    client.images.remove(ref, noprune=False)
            leftover = [t for i in client.images.list() for t in i.tags if t.startswith(prefix)]
            for ref in leftover:  # after a failed build: untag what it left
                client.images.remove(ref, noprune=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
