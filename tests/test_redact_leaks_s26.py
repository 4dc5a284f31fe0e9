"""GIVEN secrets planted in the line shapes session 26 found leaking WHEN redacted THEN none survives.

The leaks: short codes (`PIN=`, `passcode:`, `otp=`, `mfa_code:`) whose names were not secret.
"""

from __future__ import annotations

import pytest

from oomdoctor.redact import MASK, is_secret_flag, is_secret_name, redact_text

S = "Zq9planted"  # a planted value: it occurs nowhere else in the texts below


# --- 3. PINs, passcodes, one-time passwords, MFA codes ------------------------------------------------


@pytest.mark.parametrize("text", ["my PIN=4821", "passcode: 99887766", "otp=123456", "OTP_CODE=123456",
                                  "TOTP_SECRET=JBSWY3DPEHPK3PXP", "mfa_code: 123456", "HOTP=123456",
                                  "sim.pin=0000", "USER_PIN=1234", "pinCode=1234", "otpCode: 123456",
                                  "export MFA_TOKEN=123456", "--pin 4821", "--otp=123456"])
def test_short_codes_are_secret(text):
    out = redact_text(text)
    assert MASK in out
    assert not any(code in out for code in ("4821", "99887766", "123456", "JBSWY3DPEHPK3PXP", "0000", "1234"))


@pytest.mark.parametrize("name", ["PIN", "PASSCODE", "OTP", "TOTP", "HOTP", "MFA", "MFA_CODE", "OTP_CODE", "USER_PIN",
                                  "PIN_CODE", "pincode", "2FA", "2FA_CODE"])
def test_short_code_names_are_secret(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["PINNED", "PIN_MEMORY", "pin_memory", "pin-memory", "dataloader_pin_memory",
                                  "pin_memory_device", "PIN_MEM", "SPINE", "SPIN", "OPTIMIZER", "OPTION", "OPTS",
                                  "COOPTS", "LOTS", "OPTIM", "TOPT", "MFAST", "CODE", "EXIT_CODE"])
def test_look_alikes_of_short_code_names_are_not_secret(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize("text", ["DataLoader(pin_memory=True, num_workers=8)", "pin_memory: true",
                                  "--pin-memory", "--pin-mem --no-pin-mem", "dataloader_pin_memory=False",
                                  "OPTIMIZER=adamw OPTS=-O2 LOTS=3", "optim: adamw_torch option=fast"])
def test_pin_memory_and_optimizer_options_stay_readable(text):
    assert redact_text(text) == text


def test_pin_memory_flag_is_no_secret_flag():
    assert not is_secret_flag("--pin-memory") and is_secret_flag("--pin") and is_secret_flag("--otp")
