"""Content hashes for the caches: blake2b without `import hashlib`.

`import hashlib` loads OpenSSL, about 2 ms of every run, a tenth of the analysis of a small file,
which a pre-commit run on one file pays on every commit; hashlib's blake2b is CPython's own
`_blake2` module in every build anyway.
"""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # an interpreter without CPython's module: hashlib's, the same function
    from hashlib import blake2b


def content_hash(text: str, size: int = 16) -> str:
    """`text`'s hash in hex, `size` bytes long; lone surrogates (from undecodable file names) allowed."""
    return blake2b(text.encode("utf-8", "surrogatepass"), digest_size=size).hexdigest()
