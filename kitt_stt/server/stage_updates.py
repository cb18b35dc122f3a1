"""A session's text stage after ``start.wake``/``start.text`` (or ``configure``): the fields given
replace the current ones, and the result is validated as a whole (``bad_field`` if it does not hold)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import ClientFrame, TextFields, WakeFields
from kitt_stt.text import TextSettings, TextStage, WakeSettings

SettingsT = TypeVar("SettingsT", bound=BaseModel)


def updated_stage(stage: TextStage, wake: WakeFields | None, text: TextFields | None) -> TextStage:
    """``stage`` with the fields given replacing the current ones."""
    wake_settings, text_settings = stage.wake_settings, stage.text_settings
    if wake is not None:
        wake_settings = _merged("wake", WakeSettings, wake_settings, wake)
    if text is not None:
        text_settings = _merged("text", TextSettings, text_settings, text)
    return TextStage(text_settings, wake_settings)


def _merged(name: str, model: type[SettingsT], current: SettingsT, given: ClientFrame) -> SettingsT:
    """``current`` with the fields the client gave, validated as a whole (``bad_field`` if not)."""
    try:
        return model.model_validate({**current.model_dump(), **given.model_dump(exclude_none=True)})
    except ValidationError as exc:
        problems = "; ".join((f"{'.'.join(map(str, error['loc']))}: " if error["loc"] else "")
                             + error["msg"].removeprefix("Value error, ") for error in exc.errors())
        raise ProtocolError(ErrorCode.BAD_FIELD, f"{name}: {problems}") from None
