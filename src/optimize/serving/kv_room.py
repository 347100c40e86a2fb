"""A key/value cache layer with room to grow: its keys and values are the start of a larger buffer, so a decoding
step writes its new token into the room left instead of copying the whole cache into a new tensor (Transformers'
dynamic layer concatenates on every step; with a batch of sixteen rows that copy was half of a step's time on the
cpu). When the room runs out, or the batcher has replaced the tensors (a row joined or left), the layer moves into
a new buffer with room for half as many tokens again as it holds.
"""

from __future__ import annotations

from transformers.cache_utils import DynamicLayer

LEAST_ROOM = 64  # tokens


class RoomyLayer(DynamicLayer):
    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized or self.keys.numel() == 0:
            return super().update(key_states, value_states, *args, **kwargs)
        held, adding = self.keys.shape[-2], key_states.shape[-2]
        if not self._fits(held + adding):
            self._move(held + adding)
        self._key_room[:, :, held:held + adding] = key_states
        self._value_room[:, :, held:held + adding] = value_states
        self.keys = self._key_room[:, :, :held + adding]
        self.values = self._value_room[:, :, :held + adding]
        return self.keys, self.values

    def _fits(self, tokens: int) -> bool:
        """Whether the keys and values are still views at the start of this layer's buffers, with room for
        `tokens`."""
        room = getattr(self, "_key_room", None)
        return (room is not None and room.shape[-2] >= tokens and self.keys.data_ptr() == room.data_ptr()
                and self.keys.shape[0] == room.shape[0] and self.values.data_ptr() == self._value_room.data_ptr())

    def _move(self, tokens: int) -> None:
        import torch

        held = self.keys.shape[-2]
        size = tokens + max(LEAST_ROOM, tokens // 2)
        for name in ("keys", "values"):
            tensor = getattr(self, name)
            room = torch.empty((*tensor.shape[:2], size, tensor.shape[3]), dtype=tensor.dtype, device=tensor.device)
            room[:, :, :held] = tensor
            setattr(self, "_key_room" if name == "keys" else "_value_room", room)
        self.keys, self.values = self._key_room[:, :, :held], self._value_room[:, :, :held]
