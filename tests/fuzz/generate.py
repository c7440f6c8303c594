"""Regenerate the malformed trace files of the fuzz corpus (tests/fuzz/traces/) and its rate
curves too large to draw (tests/fuzz/curves/).

The files are checked in; this script documents how each was made (several are not text, so
they cannot be written by hand) and rewrites them byte for byte: `python tests/fuzz/generate.py`.
Expected outcomes live in tests/fuzz/manifest.yaml, which tests/fuzz/test_fuzz.py checks.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

HERE = Path(__file__).parent / "traces"

AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
R1 = "2023-11-16 18:15:46.6805900,374,44\n"
R2 = "2023-11-16 18:15:50.1234567,1200,210\n"
PL = "arrival_s,prompt_tokens,output_tokens\n"


def mc(ts, inp=100, out=10, **extra) -> str:
    """One Mooncake JSONL line."""
    fields = {"timestamp": ts, "input_length": inp, "output_length": out, **extra}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}\n"


def files() -> dict[str, bytes]:
    rng = random.Random(8)
    t = {
        # --- Azure CSV: truncation, encodings, binary
        "azure_truncated_row.csv": AZ + R1 + R2 + "2023-11-16 18:15:51.0,100",
        "azure_truncated_timestamp.csv": AZ + R1 + "2023-11-16 18:1",
        "azure_latin1.csv": (AZ + R1 + "2023-11-16 18:15:47.1,3\xe974,44\n").encode("latin-1"),
        "azure_utf16_bom.csv": (AZ + R1 + R2).encode("utf-16"),
        "azure_utf16le_no_bom.csv": (AZ + R1 + R2).encode("utf-16-le"),
        "binary_garbage.csv": bytes(rng.randrange(256) for _ in range(4096)),
        "binary_zeros.csv": bytes(1024),
        "gzip_named_csv.csv": gzip.compress((AZ + R1 + R2).encode(), mtime=0),
        "azure_nul_in_row.csv": AZ + R1 + "2023-11-16 18:15:47\x00,3,4\n",
        # --- Azure CSV: wrong types, empty fields, extreme numbers
        "azure_non_numeric_tokens.csv": AZ + R1 + "2023-11-16 18:15:47.1,abc,10\n",
        "azure_fractional_tokens.csv": AZ + "2023-11-16 18:15:47.1,10.5,5\n",
        "azure_negative_output.csv": AZ + R1 + "2023-11-16 18:15:47.1,100,-5\n",
        "azure_zero_output.csv": AZ + R1 + "2023-11-16 18:15:47.1,100,0\n",
        "azure_empty_timestamp.csv": AZ + R1 + ",100,5\n",
        "azure_empty_tokens.csv": AZ + R1 + "2023-11-16 18:15:47.1,,5\n",
        "azure_tokens_1e308.csv": AZ + "2023-11-16 18:15:47.1,1e308,5\n",
        "azure_tokens_2pow63.csv": AZ + f"2023-11-16 18:15:47.1,{2**63},5\n",
        "azure_tokens_nan.csv": AZ + "2023-11-16 18:15:47.1,100,nan\n",
        "azure_tokens_inf.csv": AZ + "2023-11-16 18:15:47.1,inf,5\n",
        "azure_timestamp_nan.csv": AZ + R1 + "nan,100,5\n",
        "azure_timestamp_inf.csv": AZ + "inf,100,5\n" + R1,
        "azure_bad_timestamp.csv": AZ + "yesterday,100,5\n",
        "azure_unsorted.csv": AZ + R2 + R1,
        "azure_mixed_timestamp_kinds.csv": AZ + "5.0,100,5\n" + R1,
        "azure_mixed_utc_offsets.csv": AZ + "2023-11-16T18:15:46+05:00,100,5\n" + R1,
        # --- Azure CSV: structure
        "azure_missing_column.csv": "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n",
        "azure_header_only.csv": AZ,
        "empty.csv": "",
        "blank_lines_only.csv": "\n\n  \n\r\n",
        "azure_repeated_header_line.csv": AZ + R1 + AZ + R2,
        "azure_duplicated_column.csv": "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n"
        "2023-11-16 18:15:46.68,374,44,12\n",
        "azure_extra_fields_in_row.csv": AZ + R1 + "2023-11-16 18:15:47.1,1,200,5\n",
        "azure_huge_field.csv": AZ + R1 + '"' + "9" * 200_000 + '",5,5\n',
        "azure_unterminated_quote.csv": AZ + R1 + '2023-11-16 18:15:47.1,"100,5\n' + R2,
        # --- Azure CSV that loads (expected: ok)
        "ok_azure_crlf.csv": (AZ + R1 + R2).replace("\n", "\r\n"),
        "ok_azure_utf8_bom.csv": "\ufeff" + AZ + R1 + R2,
        "ok_azure_extra_columns.csv": "TIMESTAMP,ContextTokens,GeneratedTokens,Model\n"
        "2023-11-16 18:15:46.6805900,374,44,llama\n"
        "2023-11-16 18:15:50.1234567,1200,210,llama\n",
        "ok_azure_blank_lines.csv": "\n" + AZ + R1 + "\n\n" + R2 + "\n",
        "ok_azure_utc_offsets.csv": AZ + "2023-11-16 18:15:46.6805900+00:00,374,44\n"
        "2023-11-16 20:15:50.1234567+02:00,1200,210\n",
        "ok_azure_scientific_seconds.csv": AZ + "1.0000001e5,100,5\n1.0000002e5,100,5\n",
        "ok_azure_no_final_newline.csv": AZ + R1 + R2.rstrip("\n"),
        # --- plain CSV
        "plain_span_1e308.csv": PL + "0,3,4\n1e308,3,4\n",
        "plain_negative_first.csv": PL + "-5,3,4\n0,3,4\n",
        "plain_minus_inf.csv": PL + "0,3,4\n-inf,3,4\n",
        "plain_text_arrival.csv": PL + "0,3,4\nsoon,3,4\n",
        "ok_plain_cr_only.csv": (PL + "0,3,4\n1.5,30,40\n").replace("\n", "\r"),
        "ok_plain_trailing_comma.csv": PL + "0,3,4,\n1.5,30,40,\n",
        "ok_plain_simultaneous.csv": PL + "0,3,4\n0,5,6\n0,7,8\n",
        "ok_plain_upper_suffix.CSV": PL + "0,3,4\n2,5,6\n",
        "ok_plain_subnormal_arrival.csv": PL + "0,3,4\n1e-320,5,6\n2,7,8\n",
        "plain_wrong_suffix.txt": PL + "0,3,4\n",
        # --- numbers Python's float() reads but no trace means; cells spanning lines
        "plain_underscore_digits.csv": PL + "0,3,4\n1.5,1_000,4\n",
        "plain_arabic_indic_digits.csv": PL + "0,3,4\n1.5,\u0661\u0662,4\n",
        "plain_fullwidth_arrival.csv": PL + "0,3,4\n\uff12,3,4\n",
        "azure_underscore_timestamp.csv": AZ + "100_000,3,4\n",
        "plain_multiline_quoted_cell.csv": PL + '0,3,4\n1.5,"30\n",40\n2,5,6\n',
        "azure_multiline_quoted_timestamp.csv": AZ + R1 + '"2023-11-16\n18:15:47.1",3,4\n',
        # --- Mooncake JSONL
        "mooncake_truncated.jsonl": mc(0) + mc(1000)[:25],
        "mooncake_missing_key.jsonl": mc(0) + '{"timestamp": 5, "input_length": 5}\n',
        "mooncake_string_timestamp.jsonl": mc('"0"'),
        "mooncake_bool_length.jsonl": mc(0, out="true"),
        "mooncake_null_length.jsonl": mc(0, inp="null"),
        "mooncake_float_length.jsonl": mc(0, out=5.5),
        "mooncake_length_1e308.jsonl": mc(0, inp="1e308"),
        "mooncake_length_2pow63.jsonl": mc(0, inp=2**63),
        "mooncake_timestamp_400_digits.jsonl": mc("1" + "0" * 400),
        "mooncake_int_5000_digits.jsonl": mc(0, inp="1" + "0" * 5000),
        "mooncake_nan_timestamp.jsonl": mc(0) + mc("NaN"),
        "mooncake_infinity_length.jsonl": mc(0, out="Infinity"),
        "mooncake_negative_timestamp.jsonl": mc(-5),
        "mooncake_unsorted.jsonl": mc(10) + mc(5),
        "mooncake_array_line.jsonl": mc(0) + "[0, 100, 10]\n",
        "mooncake_deep_nesting.jsonl": "[" * 100_000 + "\n",
        "mooncake_span_1e308.jsonl": mc(0) + mc("1e308"),
        "mooncake_latin1.jsonl": (
            '{"timestamp": 0, "input_length": 5, "output_length": 3, "user": "caf\xe9"}\n'
        ).encode("latin-1"),
        "mooncake_utf16_bom.jsonl": (mc(0) + mc(10)).encode("utf-16"),
        "mooncake_blank.jsonl": "\n \n",
        "mooncake_duplicate_key.jsonl": mc(0) + '{"timestamp": 5, "input_length": 5, '
        '"output_length": 3, "input_length": 9000}\n',
        "mooncake_duplicate_timestamp_key.jsonl": '{"timestamp": 5, "timestamp": 0, '
        '"input_length": 5, "output_length": 3}\n',
        "mooncake_string_underscore_length.jsonl": mc(0, inp='"1_000"'),
        "ok_mooncake_crlf.jsonl": (mc(0) + mc(1000)).replace("\n", "\r\n"),
        "ok_mooncake_line_separator_in_string.jsonl": mc(0, note='"a\u2028b"') + mc(1000),
        "ok_mooncake_extra_keys.jsonl": mc(0, hash_ids="[1, 2, 3]") + mc(1500, hash_ids="[4]"),
    }
    return {k: (v.encode() if isinstance(v, str) else v) for k, v in t.items()}


CURVES = Path(__file__).parent / "curves"
CV = "time_s,multiplier\n"


def curve_files() -> dict[str, bytes]:
    """Rate curves (workload.rate_curve.curve) that are not UTF-8 text or not a curve, and
    ones whose tiles or copies would not fit in memory."""
    return {
        "latin1.csv": (CV + "0,1\n300,1.5 \xe9t\xe9\n600,1\n").encode("latin-1"),
        "utf16.csv": (CV + "0,1\n600,1\n").encode("utf-16"),
        "binary.csv": bytes(random.Random(64).randrange(256) for _ in range(2048)),
        "zeros.csv": bytes(512),
        "gzip.csv": gzip.compress((CV + "0,1\n600,1\n").encode(), mtime=0),
        "ok_600s.csv": (CV + "0,1\n300,2\n600,1\n").encode(),
        # a curve of 1e9 s: the hour tiled to it is 5.5e9 requests
        "flat_1e9_s.csv": (CV + "0,1\n1000000000,1\n").encode(),
        # a day at a peak of 1000: 1000 copies of the tiled day superposed
        "peak_1000_day.csv": (CV + "0,1\n43200,1000\n86400,1\n").encode(),
        # a week at 1: the tiled week superposed once, then simulated (fits; a size to guard)
        "flat_week.csv": (CV + "0,1\n604800,1\n").encode(),
    }


def main() -> None:
    for folder, made in ((HERE, files()), (CURVES, curve_files())):
        folder.mkdir(exist_ok=True)
        for name, data in made.items():
            (folder / name).write_bytes(data)
        print(f"wrote {len(made)} files to {folder}")


if __name__ == "__main__":
    main()
