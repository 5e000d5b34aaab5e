"""The taxpayer id on an invoice: an 18-character unified social credit code with its GB 32100-2015 check digit."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.utils import translation

from billing.taxpayer import check_character, is_valid_taxpayer_id, normalize_taxpayer_id, validate_taxpayer_id

VALID = ["91350100M000100Y43", "91110000600037341L", "91310000775785552L"]


@pytest.mark.parametrize("code", VALID)
def test_real_codes_are_valid(code):
    assert check_character(code[:17]) == code[17]
    validate_taxpayer_id(code)
    assert is_valid_taxpayer_id(code)


def test_lower_case_and_spaces_are_normalized():
    assert normalize_taxpayer_id(" 91350100m000100y43 ") == "91350100M000100Y43"
    assert normalize_taxpayer_id("9135 0100 M000 100Y 43") == "91350100M000100Y43"
    assert is_valid_taxpayer_id("91110000600037341l")


class Refusal:
    def __init__(self, error: ValidationError, language: str):
        self.code = error.code
        with translation.override(language):  # the messages are lazy: read them in the language
            self.messages = [str(message) for message in error.messages]


def refusal(code: str, language: str = "en") -> Refusal:
    with pytest.raises(ValidationError) as caught:
        validate_taxpayer_id(code)
    return Refusal(caught.value, language)


def test_a_wrong_check_digit_is_refused_by_name_with_the_right_digit():
    error = refusal("91350100M000100Y44")
    assert error.code == "taxpayer_id_check_digit"
    assert error.messages == ["The taxpayer id (unified social credit code) is not valid: its check digit should be 3."]


def test_the_refusal_in_chinese_names_the_field():
    (message,) = refusal("91110000600037341K", "zh-hans").messages
    assert message == "统一社会信用代码无效：校验位应为 L。"


@pytest.mark.parametrize("code", ["", "9135010", "91350100M000100Y4", "91350100M000100Y433"])
def test_a_wrong_length_is_refused(code):
    error = refusal(code)
    assert error.code == "taxpayer_id_length"
    assert "taxpayer id" in error.messages[0] and "18 characters" in error.messages[0]
    assert "统一社会信用代码" in refusal(code, "zh-hans").messages[0]


@pytest.mark.parametrize("letter", ["I", "O", "Z", "S", "V"])
def test_the_letters_the_standard_leaves_out_are_refused(letter):
    error = refusal("91350100M000100Y4" + letter)
    assert error.code == "taxpayer_id_characters"
    assert letter in error.messages[0]


def test_punctuation_is_refused():
    assert refusal("91350100-000100Y43").code == "taxpayer_id_characters"
