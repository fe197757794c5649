//! Writing JSON text exactly as orjson writes it: integers, doubles and strings.

/// Append the decimal digits of `value`. Block hashes have ~19 digits and the publisher writes
/// one per page: the value is cut into parts below 10^8 (two multiplies at most) and each part's
/// eight digits are made at once in the bytes of one u64 (`eight_digits`), then written as one
/// 8-byte store; only the leading part's leading zeros are dropped.
#[inline(always)]
pub fn write_u64(out: &mut Vec<u8>, value: u64) {
    const E8: u64 = 100_000_000;
    const E16: u64 = E8 * E8;
    if value < E8 {
        write_leading(out, value as u32);
    } else if value < E16 {
        write_leading(out, (value / E8) as u32);
        write_eight(out, (value % E8) as u32);
    } else {
        // below 1845 * 10^16: the leading part has at most four digits
        let rest = value % E16;
        write_leading(out, (value / E16) as u32);
        write_eight(out, (rest / E8) as u32);
        write_eight(out, (rest % E8) as u32);
    }
}

const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// The eight decimal digits of `value` (below 10^8, leading zeros included) as the bytes of a
/// u64, most significant digit in the lowest byte, each a number 0..=9 (not yet ASCII).
///
/// The value is split in lanes and each lane divided by multiplying by a reciprocal: into two
/// 32-bit lanes of four digits (`/ 10^4`), four 16-bit lanes of two (`x * 10486 >> 20` is
/// `x / 100` for x below 10^4), then eight bytes of one (`x * 103 >> 10` is `x / 10` for x
/// below 100). No lane's product overflows into the next, and the masks drop the fraction
/// bits that a shift moves into the lane below.
#[inline(always)]
fn eight_digits(value: u32) -> u64 {
    debug_assert!(value < 100_000_000);
    let fours = u64::from(value / 10_000) | (u64::from(value % 10_000) << 32);
    let hundreds = ((fours * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let twos = hundreds | ((fours - hundreds * 100) << 16);
    let tens = ((twos * 103) >> 10) & 0x000f_000f_000f_000f;
    tens | ((twos - tens * 10) << 8)
}

/// Append the eight digits of `value` (below 10^8), leading zeros included.
#[inline(always)]
fn write_eight(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&(eight_digits(value) | ASCII_ZEROS).to_le_bytes());
}

/// Append the digits of `value` (below 10^8) without leading zeros ("0" for zero): all eight
/// are stored at once, shifted so the significant ones come first, and the rest cut off.
#[inline(always)]
fn write_leading(out: &mut Vec<u8>, value: u32) {
    let digits = eight_digits(value);
    // Leading zero digits are the low zero bytes; zero itself keeps its last digit.
    let zeros = ((digits.trailing_zeros() / 8) as usize).min(7);
    let shifted = (digits | ASCII_ZEROS) >> (8 * zeros);
    out.extend_from_slice(&shifted.to_le_bytes());
    out.truncate(out.len() - zeros);
}

/// Append the decimal text of `value`.
#[inline(always)]
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
    let (negative, digits, exponent) = shortest_digits(value);
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

/// The shortest digits that read back to the finite `value` (no leading or trailing zeros but
/// a lone `0`), and the decimal exponent of the first: `value = ±d.ddd × 10^exponent`.
///
/// The digits come from Ryū, which breaks a tie between two equally near shortest candidates
/// towards the even one, as CPython's `repr` and orjson do (Rust's own `{:e}` rounds such a
/// tie up: `1796401612.72265625` would be written `...7226563`, orjson writes `...7226562`).
fn shortest_digits(value: f64) -> (bool, Vec<u8>, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(value).as_bytes();
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mantissa, power) = match text.iter().position(|&byte| byte == b'e' || byte == b'E') {
        Some(at) => {
            let power = std::str::from_utf8(&text[at + 1..])
                .ok()
                .and_then(|power| power.parse::<i32>().ok())
                .unwrap_or(0);
            (&text[..at], power)
        }
        None => (text, 0),
    };
    let point = mantissa
        .iter()
        .position(|&byte| byte == b'.')
        .unwrap_or(mantissa.len());
    let all: Vec<u8> = mantissa.iter().copied().filter(|&b| b != b'.').collect();
    let leading = all.iter().take_while(|&&digit| digit == b'0').count();
    if leading == all.len() {
        return (negative, vec![b'0'], 0);
    }
    let mut digits = all[leading..].to_vec();
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    let exponent = point as i32 - 1 - leading as i32 + power;
    (negative, digits, exponent)
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
        samples.extend((1..20).map(|power| 10u64.pow(power) - 1));
        samples.extend((1..20).map(|power| 10u64.pow(power) + 7));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            samples.extend([x, x >> 8, x >> 24, x >> 40, x >> 56]);
        }
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
    fn every_part_below_ten_to_the_eight_is_written_digit_for_digit() {
        let small = 0..200_000u64;
        let strided = (0..100_000_000u64).step_by(9_973);
        let mut out = Vec::new();
        for value in small.chain(strided) {
            for scaled in [value, value + 100_000_000, value * 100_000_000 + 42] {
                out.clear();
                write_u64(&mut out, scaled);
                assert_eq!(out, scaled.to_string().into_bytes());
            }
        }
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
            // Exact ties between two shortest candidates go to the even digit, as in orjson.
            (1_796_401_612.0 + 185.0 / 256.0, "1796401612.7226562"),
            (1_796_401_614.0 + 185.0 / 256.0, "1796401614.7226562"),
            ((1u64 << 53) as f64 + 1.0, "9007199254740992.0"),
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
