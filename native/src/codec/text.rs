//! Writing JSON text exactly as orjson writes it: integers, doubles and strings.

/// "00", "01", ..., "99": two digits per table lookup.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Append the decimal digits of `value` (two at a time: block hashes have ~19 digits, and the
/// publisher writes one per page).
#[inline]
pub fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut buffer = [0u8; 20];
    let mut at = buffer.len();
    while value >= 100 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        at -= 2;
        buffer[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = value as usize * 2;
        at -= 2;
        buffer[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        buffer[at] = b'0' + value as u8;
    }
    out.extend_from_slice(&buffer[at..]);
}

/// Append the decimal text of `value`.
#[inline]
pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    write_u64(out, value.unsigned_abs());
}

/// Append a finite double as orjson writes it: the shortest digits that read back to it, in
/// positional form for decimal exponents -5 to 15 (`100.0`, `0.00001`) and in scientific form
/// otherwise (`1e+16`, `1.5e-7`).
pub fn write_f64(out: &mut Vec<u8>, value: f64) {
    // `{:e}` gives the shortest round-trip digits as `d.ddde<exp>`.
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let digits: Vec<u8> = mantissa.bytes().filter(|b| *b != b'.').collect();
    if negative {
        out.push(b'-');
    }
    if (-5..16).contains(&exponent) {
        if exponent >= 0 {
            let whole = exponent as usize + 1;
            if digits.len() <= whole {
                out.extend_from_slice(&digits);
                out.extend(std::iter::repeat(b'0').take(whole - digits.len()));
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..whole]);
                out.push(b'.');
                out.extend_from_slice(&digits[whole..]);
            }
        } else {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat(b'0').take((-exponent - 1) as usize));
            out.extend_from_slice(&digits);
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        if exponent > 0 {
            out.push(b'+');
        }
        out.extend_from_slice(exponent.to_string().as_bytes());
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Append `text` as a JSON string: `"` and `\` escaped, control characters as `\b \f \n \r \t`
/// or `\u00XX`, everything else (non-ASCII included) as is.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut run = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[run..at]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        run = at + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// How an error message quotes a string from a record: as JSON, cut after 40 characters
/// (then followed by `...`).
pub fn quoted_excerpt(text: &str) -> String {
    const LIMIT: usize = 40;
    let mut out = Vec::new();
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => {
            write_str(&mut out, &text[..cut]);
            out.extend_from_slice(b"...");
        }
        None => write_str(&mut out, text),
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_written_as_their_decimal_text() {
        let mut samples = vec![
            0u64,
            1,
            9,
            10,
            11,
            99,
            100,
            101,
            999,
            1000,
            u64::MAX,
            1 << 63,
        ];
        samples.extend((0..64).map(|shift| (1u64 << shift) - 1));
        samples.extend((1..20).map(|power| 10u64.pow(power)));
        for value in samples {
            let mut out = Vec::new();
            write_u64(&mut out, value);
            assert_eq!(out, value.to_string().into_bytes());
        }
        let mut out = Vec::new();
        write_i64(&mut out, i64::MIN);
        assert_eq!(out, i64::MIN.to_string().into_bytes());
    }

    fn float(value: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, value);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn doubles_are_written_as_orjson_writes_them() {
        let cases = [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e16, "1.5e+16"),
            (1e-7, "1e-7"),
            (1e-6, "1e-6"),
            (1e-5, "0.00001"),
            (2.5e-5, "0.000025"),
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (1712345678.123456, "1712345678.123456"),
            (12.5, "12.5"),
            (-98765.43209999999, "-98765.43209999999"),
        ];
        for (value, text) in cases {
            assert_eq!(float(value), text, "{value:e}");
        }
    }

    #[test]
    fn strings_escape_like_orjson() {
        let mut out = Vec::new();
        write_str(
            &mut out,
            "a\u{0}\u{1f}\u{7f}\"\\/\u{2028}\u{1F600}\u{8}\u{c}\n\r\t",
        );
        assert_eq!(
            out,
            "\"a\\u0000\\u001f\u{7f}\\\"\\\\/\u{2028}\u{1F600}\\b\\f\\n\\r\\t\"".as_bytes()
        );
    }

    #[test]
    fn integers() {
        let mut out = Vec::new();
        write_i64(&mut out, i64::MIN);
        out.push(b' ');
        write_i64(&mut out, 0);
        out.push(b' ');
        write_u64(&mut out, u64::MAX);
        assert_eq!(out, b"-9223372036854775808 0 18446744073709551615");
    }

    #[test]
    fn long_strings_are_cut_in_messages() {
        assert_eq!(quoted_excerpt("abc"), "\"abc\"");
        let long = "é".repeat(41);
        assert_eq!(quoted_excerpt(&long), format!("\"{}\"...", "é".repeat(40)));
    }
}
