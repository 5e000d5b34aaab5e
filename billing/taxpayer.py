"""The taxpayer id on a Chinese invoice: the 18-character unified social credit code (统一社会信用代码).

GB 32100-2015: 17 characters and a check character, all from "0123456789ABCDEFGHJKLMNPQRTUWXY" (the
digits and the capitals without I, O, Z, S, V). The check character is the one whose value makes
sum(value(c_i) * W_i) + value(check) a multiple of 31.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

ALPHABET = "0123456789ABCDEFGHJKLMNPQRTUWXY"
WEIGHTS = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)
LENGTH = 18


def normalize_taxpayer_id(raw: str | None) -> str:
    """Upper case, without the spaces people paste around (and inside) it."""
    return "".join(str(raw or "").split()).upper()


def check_character(first17: str) -> str:
    total = sum(ALPHABET.index(char) * weight for char, weight in zip(first17, WEIGHTS, strict=True))
    return ALPHABET[(31 - total % 31) % 31]


def validate_taxpayer_id(value: str) -> None:
    """Refuse anything but a well-formed code with the right check character; the message names the field."""
    code = normalize_taxpayer_id(value)
    if len(code) != LENGTH:
        raise ValidationError(
            _("The taxpayer id (unified social credit code) must be 18 characters; this one has %(count)s."),
            code="taxpayer_id_length",
            params={"count": len(code)},
        )
    wrong = sorted({char for char in code if char not in ALPHABET})
    if wrong:
        raise ValidationError(
            _(
                "The taxpayer id (unified social credit code) may hold only digits and the capitals "
                "A–Z without I, O, Z, S and V; it has %(chars)s."
            ),
            code="taxpayer_id_characters",
            params={"chars": " ".join(wrong)},
        )
    expected = check_character(code[:17])
    if code[17] != expected:
        raise ValidationError(
            _("The taxpayer id (unified social credit code) is not valid: its check digit should be %(expected)s."),
            code="taxpayer_id_check_digit",
            params={"expected": expected},
        )


def is_valid_taxpayer_id(value: str) -> bool:
    try:
        validate_taxpayer_id(value)
    except ValidationError:
        return False
    return True
