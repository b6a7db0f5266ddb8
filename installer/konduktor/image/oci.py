"""An OCI image archive from a root file system tarball (pure: files in, files out; no registry, no runtime).

The layer is the root file system re-written so that the same files give the same bytes: entries sorted by
name, modification times clamped to SOURCE_DATE_EPOCH, owners numeric (no user or group names), no extended
headers but long names, gzip without a name or a time. The config, the manifest and the index are JSON with
sorted keys. The archive is the OCI image layout (oci-layout, index.json, blobs/sha256/...) as an uncompressed
tar written the same way: what `skopeo copy oci-archive:PATH ...` and `podman load -i PATH` read.

Specification: https://github.com/opencontainers/image-spec (image-layout.md, manifest.md, config.md).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageConfig:
    """What the image runs, as the OCI config's `config` section says it."""

    user: str
    entrypoint: Sequence[str]
    cmd: Sequence[str]
    env: Sequence[str]
    working_dir: str = "/"
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Blob:
    digest: str  # sha256:...
    size: int


@dataclass(frozen=True)
class Archive:
    path: Path
    manifest: Blob  # the image's digest is the manifest's
    layer: Blob
    layer_unpacked: int  # bytes of the uncompressed layer tar
    config: dict[str, Any]


def clamp_member(member: tarfile.TarInfo, epoch: int) -> tarfile.TarInfo:
    """`member` as the layer writes it: name relative to /, mtime at most `epoch`, numeric owners, no pax extras."""
    clean = tarfile.TarInfo(member.name.removeprefix("./").rstrip("/") or ".")
    clean.type = member.type
    clean.mode = member.mode & 0o7777
    clean.uid, clean.gid = member.uid, member.gid
    clean.uname = clean.gname = ""
    clean.mtime = min(int(member.mtime), epoch)
    clean.linkname = member.linkname.removeprefix("./") if member.islnk() else member.linkname
    clean.size = member.size if member.isreg() else 0
    clean.devmajor, clean.devminor = member.devmajor, member.devminor
    return clean


Keep = Callable[[PurePosixPath], bool]


def rewrite_rootfs(source: Path, target: IO[bytes], epoch: int, keep: Keep) -> None:
    """The root file system tarball `source` re-written to `target` reproducibly, without the members `keep`
    refuses. A hard link's group is written as its first name in sorted order (with the data) and links to it."""
    with tarfile.open(source) as tar:
        members = {clamp_member(m, epoch).name: m for m in tar.getmembers()}
        kept = {name: m for name, m in members.items() if name == "." or keep(PurePosixPath(name))}
        # Hard links: the group of names that share the data of the member they point to.
        groups: dict[str, list[str]] = {}
        for name, member in kept.items():
            if member.islnk():
                groups.setdefault(clamp_member(member, epoch).linkname, []).append(name)
        data_of: dict[str, str] = {}  # written name -> the member whose data it carries
        first_of: dict[str, str] = {}  # a group's any name -> the name written with the data
        for target_name, links in groups.items():
            names = sorted([target_name, *links]) if target_name in kept else sorted(links)
            for name in names:
                first_of[name] = names[0]
            data_of[names[0]] = target_name
        with tarfile.open(fileobj=target, mode="w|", format=tarfile.PAX_FORMAT) as out:
            for name in sorted(kept):
                member = kept[name]
                first = first_of.get(name)
                if first is not None and first != name:
                    link = clamp_member(members[data_of[first]], epoch)
                    link.name, link.type, link.linkname, link.size = name, tarfile.LNKTYPE, first, 0
                    out.addfile(link)
                    continue
                source_member = members[data_of[name]] if first is not None else member
                clean = clamp_member(source_member, epoch)
                clean.name = name
                data = tar.extractfile(source_member) if source_member.isreg() else None
                out.addfile(clean, data)


class _Sink(Protocol):
    def write(self, data: Any, /) -> int: ...


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through it to `sink` (None: nowhere)."""

    def __init__(self, sink: _Sink | None) -> None:
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.size += len(view)
        if self.sink is not None:
            self.sink.write(view)
        return len(view)

    @property
    def blob(self) -> Blob:
        return Blob(f"sha256:{self.sha.hexdigest()}", self.size)


def write_layer(rootfs: Path, layer: Path, epoch: int, keep: Keep) -> tuple[Blob, Blob]:
    """The gzipped layer of `rootfs` at `layer`: (its compressed blob, its uncompressed diff id)."""
    with layer.open("wb") as file:
        compressed = _Hashing(file)
        # No file name and time 0 in the gzip header; level 6, gzip's default.
        with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=6) as zipped:
            uncompressed = _Hashing(zipped)
            rewrite_rootfs(rootfs, uncompressed, epoch, keep)  # type: ignore[arg-type]
    return compressed.blob, uncompressed.blob


def canonical(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def image_config(config: ImageConfig, diff_id: Blob, epoch: int, history: str) -> dict[str, Any]:
    # The OCI image spec's `created` (RFC 3339); `image` sits below `kube`, so not `kube.timestamps.format_time`.
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": config.user,
            "Entrypoint": list(config.entrypoint),
            "Cmd": list(config.cmd),
            "Env": list(config.env),
            "WorkingDir": config.working_dir,
            "Labels": dict(config.labels),
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id.digest]},
        "history": [{"created": created, "created_by": history}],
    }


def _blob_path(digest: str) -> str:
    return f"blobs/sha256/{digest.removeprefix('sha256:')}"


def _add(tar: tarfile.TarFile, name: str, epoch: int, data: bytes | None = None, path: Path | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.mode, info.uid, info.gid = epoch, 0o644, 0, 0
    if data is None and path is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif path is not None:
        info.size = path.stat().st_size
        with path.open("rb") as file:
            tar.addfile(info, file)
    else:
        assert data is not None
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def write_archive(
    rootfs: Path, archive: Path, *, config: ImageConfig, epoch: int, keep: Keep, tag: str, history: str
) -> Archive:
    """The OCI image archive of `rootfs` (one layer) at `archive`, tagged `tag` in its index."""
    layer_file = archive.with_name(archive.name + ".layer.tmp")
    try:
        layer, diff_id = write_layer(rootfs, layer_file, epoch, keep)
        config_document = image_config(config, diff_id, epoch, history)
        config_bytes = canonical(config_document)
        config_blob = Blob(f"sha256:{hashlib.sha256(config_bytes).hexdigest()}", len(config_bytes))
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": config_blob.digest, "size": config_blob.size},
            "layers": [{"mediaType": LAYER_TYPE, "digest": layer.digest, "size": layer.size}],
        }
        manifest_bytes = canonical(manifest)
        manifest_blob = Blob(f"sha256:{hashlib.sha256(manifest_bytes).hexdigest()}", len(manifest_bytes))
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_TYPE,
                    "digest": manifest_blob.digest,
                    "size": manifest_blob.size,
                    "annotations": {REF_NAME: tag},
                }
            ],
        }
        partial = archive.with_name(archive.name + ".tmp")
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            entries: list[tuple[str, bytes | None, Path | None]] = [
                ("blobs", None, None),
                ("blobs/sha256", None, None),
                (_blob_path(config_blob.digest), config_bytes, None),
                (_blob_path(layer.digest), None, layer_file),
                (_blob_path(manifest_blob.digest), manifest_bytes, None),
                ("index.json", canonical(index), None),
                ("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}), None),
            ]
            for name, data, path in sorted(entries, key=lambda entry: entry[0]):
                _add(tar, name, epoch, data, path)
        partial.replace(archive)
    finally:
        layer_file.unlink(missing_ok=True)
    return Archive(archive, manifest_blob, layer, diff_id.size, config_document)


# --- reading an archive back -------------------------------------------------------------------------------------


def _json_member(tar: tarfile.TarFile, name: str) -> dict[str, Any]:
    member = tar.extractfile(name)
    if member is None:
        raise ValueError(f"{name} is not a file in the archive")
    document: dict[str, Any] = json.load(member)
    return document


def read_index(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        return _json_member(tar, "index.json")


def manifest_digest(archive: Path) -> str:
    """The digest of the one image the archive's index names (what a registry calls the image's digest)."""
    (entry,) = read_index(archive)["manifests"]
    digest: str = entry["digest"]
    return digest


def read_image(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, config) of the archive's image; every blob's digest checked against its content."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.startswith("blobs/sha256/") and member.isreg():
                blob = tar.extractfile(member)
                assert blob is not None
                sha = hashlib.sha256()
                while chunk := blob.read(_CHUNK):
                    sha.update(chunk)
                if sha.hexdigest() != member.name.rpartition("/")[2]:
                    raise ValueError(f"{member.name}: its content does not match its digest")
        manifest = _json_member(tar, _blob_path(manifest_digest(archive)))
        config = _json_member(tar, _blob_path(manifest["config"]["digest"]))
    return manifest, config


def layer_members(archive: Path) -> Iterator[tarfile.TarInfo]:
    """The members of the image's layers, in order, each with its data unread."""
    manifest, _ = read_image(archive)
    with tarfile.open(archive) as tar:
        for layer in manifest["layers"]:
            blob = tar.extractfile(_blob_path(layer["digest"]))
            assert blob is not None
            with tarfile.open(fileobj=blob, mode="r|gz") as layer_tar:
                yield from layer_tar


def unpack(archive: Path, root: Path) -> None:
    """The image's root file system at `root` (created), owners and modes as in the layers (run as root)."""
    manifest, _ = read_image(archive)
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        for layer in manifest["layers"]:
            blob = tar.extractfile(_blob_path(layer["digest"]))
            assert blob is not None
            with tarfile.open(fileobj=blob, mode="r|gz") as layer_tar:
                # Trusted as written by write_archive: owners, modes (setuid, sticky /tmp) and absolute symbolic
                # links are a root file system's.
                layer_tar.extractall(root, filter="fully_trusted", numeric_owner=True)
