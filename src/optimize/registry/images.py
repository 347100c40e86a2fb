"""Images of chat rows, kept by the registry under the sha256 of their bytes: which of a list it holds, one read
back (by a token that sees a version naming it), and one
image's bytes received — streamed into a staged blob, verified against the sha256 it was sent under, checked as an
image (chat/images), then stored with its format and size. An image already held is not read again, so a second
version over the same pages, or a push run again after an interruption, sends only what is missing."""

from __future__ import annotations

from sqlalchemy import select

from optimize.blobs.local import BlobWriter
from optimize.chat.images import MAX_IMAGE_BYTES, image_error
from optimize.core.access import current, sees_namespace
from optimize.core.clock import utcnow
from optimize.core.digests import is_sha256_hex
from optimize.core.errors import ChecksumMismatch, Invalid, NotFound, TooLarge
from optimize.registry.uploads import Registry
from optimize.schemas.registry import HeldImages, ImageReceived
from optimize.store.db import insert_ignoring_conflict
from optimize.store.tables import Dataset, DatasetVersion, RegistryImage

MOST_ASKED = 10_000  # digests one held query may name


def held_images(registry: Registry, digests: list[str]) -> HeldImages:
    """Which of `digests` the registry holds (its record, and bytes that still hash to their name)."""
    if not isinstance(digests, list) or len(digests) > MOST_ASKED or not all(
            isinstance(d, str) and is_sha256_hex(d) for d in digests):
        raise Invalid(f"sha256 must list at most {MOST_ASKED:,} image digests (64 lowercase hex digits each)")
    with registry.store.transaction() as session:
        known = set(session.scalars(select(RegistryImage.sha256).where(RegistryImage.sha256.in_(set(digests)))))
    held = [d for d in dict.fromkeys(digests) if d in known and registry.blobs.holds(d)]
    return HeldImages(held=held, missing=[d for d in dict.fromkeys(digests) if d not in set(held)])


class ImageReceiver:
    """One image's bytes, staged as they stream, checked whole."""

    def __init__(self, registry: Registry, sha256: str) -> None:
        self.registry, self.sha256 = registry, sha256
        self.writer: BlobWriter = registry.blobs.writer()

    def feed(self, chunk: bytes) -> None:
        if self.writer.size + len(chunk) > MAX_IMAGE_BYTES:
            self.abort()
            raise TooLarge(f"image sha256:{self.sha256} is longer than {MAX_IMAGE_BYTES:,} bytes, the most an image "
                           "holds", hint="send a smaller image")
        self.writer.write(chunk)

    def finish(self) -> ImageReceived:
        self.writer.flush()
        if self.writer.sha256 != self.sha256:
            self.abort()
            raise ChecksumMismatch(f"the bytes received hash to sha256:{self.writer.sha256}, not the promised "
                                   f"sha256:{self.sha256}", hint="send the image again")
        info, why = image_error(self.writer.staging_path.read_bytes())
        if info is None:
            self.abort()
            raise Invalid(f"image sha256:{self.sha256} {why}", hint="send a PNG, JPEG, WebP or GIF image")
        size = self.writer.size
        self.writer.commit(self.sha256)
        with self.registry.store.transaction() as session:
            insert_ignoring_conflict(session, RegistryImage, {
                "sha256": self.sha256, "size_bytes": size, "format": info.format, "width": info.width,
                "height": info.height, "created_at": utcnow()}, ["sha256"])
        return ImageReceived(sha256=self.sha256, bytes=size, format=info.format, width=info.width,
                             height=info.height, already_held=False)

    def abort(self) -> None:
        self.writer.abort()


MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}


def readable_image(registry: Registry, sha256: str) -> tuple[str, str]:
    """(media type, sha256) of an image a caller may read: one the registry holds that a dataset version in a
    namespace the caller's token sees names (an unlimited token sees every one)."""
    if not is_sha256_hex(sha256):
        raise Invalid(f"{sha256!r} is no image digest (64 lowercase hex digits)")
    with registry.store.transaction() as session:
        found = session.get(RegistryImage, sha256)
        visible = found is not None and (current() is None or any(
            sees_namespace(namespace) and any(item.get("sha256") == sha256 for item in images or [])
            for namespace, images in session.execute(
                select(Dataset.namespace, DatasetVersion.images).join(Dataset, Dataset.id == DatasetVersion.dataset_id)
                .where(DatasetVersion.images.is_not(None)))))
        if not visible:
            raise NotFound(f"no image sha256:{sha256} is held for this token",
                           hint="a dataset version's rows name their images; akka registry datasets get shows them")
        return MEDIA_TYPES.get(found.format, "application/octet-stream"), sha256


def open_image(registry: Registry, sha256: str) -> ImageReceiver | ImageReceived:
    """A receiver for the image, or its description when the registry holds it already."""
    if not is_sha256_hex(sha256):
        raise Invalid(f"{sha256!r} is no image digest (64 lowercase hex digits)")
    with registry.store.transaction() as session:
        found = session.get(RegistryImage, sha256)
        if found is not None and registry.blobs.holds(sha256):
            return ImageReceived(sha256=sha256, bytes=found.size_bytes, format=found.format, width=found.width,
                                 height=found.height, already_held=True)
    return ImageReceiver(registry, sha256)
