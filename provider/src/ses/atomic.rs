//! Atomic operations applied at the target, element by element, on the
//! bytes of a registered region (native byte order: peers of one job share
//! it). The target applies each operation in one go in its progress thread,
//! so concurrent updates from several peers never interleave within an
//! operation.
//!
//! Operation and datatype codes are libfabric's (`enum fi_op`,
//! `enum fi_datatype`), so they cross the wire and the ABI unchanged.

/// `enum fi_datatype` values the engine implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Datatype {
    I8 = 0,
    U8 = 1,
    I16 = 2,
    U16 = 3,
    I32 = 4,
    U32 = 5,
    I64 = 6,
    U64 = 7,
    F32 = 8,
    F64 = 9,
}

impl Datatype {
    pub fn from_code(code: u32) -> Option<Datatype> {
        use Datatype::*;
        Some(match code {
            0 => I8,
            1 => U8,
            2 => I16,
            3 => U16,
            4 => I32,
            5 => U32,
            6 => I64,
            7 => U64,
            8 => F32,
            9 => F64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        use Datatype::*;
        match self {
            I8 | U8 => 1,
            I16 | U16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 => 8,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Datatype::F32 | Datatype::F64)
    }
}

/// `enum fi_op` values the engine implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    Min = 0,
    Max = 1,
    Sum = 2,
    Prod = 3,
    Lor = 4,
    Land = 5,
    Bor = 6,
    Band = 7,
    Lxor = 8,
    Bxor = 9,
    Read = 10,
    Write = 11,
    Cswap = 12,
    CswapNe = 13,
    CswapLe = 14,
    CswapLt = 15,
    CswapGe = 16,
    CswapGt = 17,
    Mswap = 18,
}

impl AtomicOp {
    pub fn from_code(code: u32) -> Option<AtomicOp> {
        use AtomicOp::*;
        Some(match code {
            0 => Min,
            1 => Max,
            2 => Sum,
            3 => Prod,
            4 => Lor,
            5 => Land,
            6 => Bor,
            7 => Band,
            8 => Lxor,
            9 => Bxor,
            10 => Read,
            11 => Write,
            12 => Cswap,
            13 => CswapNe,
            14 => CswapLe,
            15 => CswapLt,
            16 => CswapGe,
            17 => CswapGt,
            18 => Mswap,
            _ => return None,
        })
    }

    /// Compare operations carry a compare operand (fi_compare_atomic).
    pub fn is_compare(self) -> bool {
        use AtomicOp::*;
        matches!(
            self,
            Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt | Mswap
        )
    }

    /// Whether the combination is implemented (fi_query_atomic).
    pub fn supports(self, dt: Datatype) -> bool {
        use AtomicOp::*;
        match self {
            Lor | Land | Lxor | Bor | Band | Bxor | Mswap => !dt.is_float(),
            _ => true,
        }
    }
}

/// The compare-and-swap family, alike for integers and floats: `x` when
/// the comparison of `c` with `cur` holds, else `cur`; `None` for any other
/// operation.
fn compare_swap<T: PartialOrd>(op: AtomicOp, cur: T, x: T, c: T) -> Option<T> {
    use AtomicOp::*;
    let hit = match op {
        Cswap => c == cur,
        CswapNe => c != cur,
        CswapLe => c <= cur,
        CswapLt => c < cur,
        CswapGe => c >= cur,
        CswapGt => c > cur,
        _ => return None,
    };
    Some(if hit { x } else { cur })
}

macro_rules! int_op {
    ($t:ty, $op:expr, $cur:expr, $x:expr, $c:expr) => {{
        let (cur, x, c): ($t, $t, $t) = ($cur, $x, $c);
        use AtomicOp::*;
        match $op {
            Min => cur.min(x),
            Max => cur.max(x),
            Sum => cur.wrapping_add(x),
            Prod => cur.wrapping_mul(x),
            Lor => ((cur != 0) || (x != 0)) as $t,
            Land => ((cur != 0) && (x != 0)) as $t,
            Lxor => ((cur != 0) != (x != 0)) as $t,
            Bor => cur | x,
            Band => cur & x,
            Bxor => cur ^ x,
            Read => cur,
            Write => x,
            Mswap => (x & c) | (cur & !c),
            cswap => compare_swap(cswap, cur, x, c).unwrap_or(cur),
        }
    }};
}

macro_rules! float_op {
    ($t:ty, $op:expr, $cur:expr, $x:expr, $c:expr) => {{
        let (cur, x, c): ($t, $t, $t) = ($cur, $x, $c);
        use AtomicOp::*;
        match $op {
            Min => cur.min(x),
            Max => cur.max(x),
            Sum => cur + x,
            Prod => cur * x,
            Read => cur,
            Write => x,
            // Anything else is refused by `supports`; memory stays as it is.
            other => compare_swap(other, cur, x, c).unwrap_or(cur),
        }
    }};
}

macro_rules! apply_typed {
    ($t:ty, $kind:ident, $op:expr, $mem:expr, $operand:expr, $compare:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        let get = |b: &[u8], i: usize| -> $t {
            let mut a = [0u8; N];
            if let Some(s) = b.get(i * N..i * N + N) {
                a.copy_from_slice(s);
            }
            <$t>::from_ne_bytes(a)
        };
        for i in 0..$mem.len() / N {
            let cur = get($mem, i);
            let new = $kind!($t, $op, cur, get($operand, i), get($compare, i));
            $mem[i * N..i * N + N].copy_from_slice(&new.to_ne_bytes());
        }
    }};
}

/// Apply `op` to every element of `mem` with the matching elements of
/// `operand` (and `compare` for compare operations); `mem` holds the old
/// values on entry and the new ones on return. The caller keeps a copy of
/// the old values for fetching operations. Short operands read as zeros.
pub fn apply(op: AtomicOp, dt: Datatype, mem: &mut [u8], operand: &[u8], compare: &[u8]) {
    use Datatype::*;
    match dt {
        I8 => apply_typed!(i8, int_op, op, mem, operand, compare),
        U8 => apply_typed!(u8, int_op, op, mem, operand, compare),
        I16 => apply_typed!(i16, int_op, op, mem, operand, compare),
        U16 => apply_typed!(u16, int_op, op, mem, operand, compare),
        I32 => apply_typed!(i32, int_op, op, mem, operand, compare),
        U32 => apply_typed!(u32, int_op, op, mem, operand, compare),
        I64 => apply_typed!(i64, int_op, op, mem, operand, compare),
        U64 => apply_typed!(u64, int_op, op, mem, operand, compare),
        F32 => apply_typed!(f32, float_op, op, mem, operand, compare),
        F64 => apply_typed!(f64, float_op, op, mem, operand, compare),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_i32(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    fn i32s(b: &[u8]) -> Vec<i32> {
        b.chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn integer_ops() {
        let cases: &[(AtomicOp, i32, i32, i32, i32)] = &[
            // (op, memory, operand, compare, result)
            (AtomicOp::Sum, 5, -7, 0, -2),
            (AtomicOp::Prod, 5, -7, 0, -35),
            (AtomicOp::Min, 5, -7, 0, -7),
            (AtomicOp::Max, 5, -7, 0, 5),
            (AtomicOp::Bor, 0b1010, 0b0110, 0, 0b1110),
            (AtomicOp::Band, 0b1010, 0b0110, 0, 0b0010),
            (AtomicOp::Bxor, 0b1010, 0b0110, 0, 0b1100),
            (AtomicOp::Lor, 0, 3, 0, 1),
            (AtomicOp::Land, 2, 0, 0, 0),
            (AtomicOp::Lxor, 2, 3, 0, 0),
            (AtomicOp::Read, 9, 1, 0, 9),
            (AtomicOp::Write, 9, 1, 0, 1),
            (AtomicOp::Cswap, 9, 1, 9, 1),
            (AtomicOp::Cswap, 9, 1, 8, 9),
            (AtomicOp::CswapNe, 9, 1, 8, 1),
            (AtomicOp::CswapLe, 9, 1, 9, 1),
            (AtomicOp::CswapLt, 9, 1, 9, 9),
            (AtomicOp::CswapGe, 9, 1, 10, 1),
            (AtomicOp::CswapGt, 9, 1, 9, 9),
            (AtomicOp::Mswap, 0b1100, 0b1010, 0b0110, 0b1010),
        ];
        for &(op, m, x, c, want) in cases {
            let mut mem = bytes_i32(&[m, m]);
            apply(
                op,
                Datatype::I32,
                &mut mem,
                &bytes_i32(&[x, x]),
                &bytes_i32(&[c, c]),
            );
            assert_eq!(i32s(&mem), vec![want, want], "{op:?}");
        }
    }

    #[test]
    fn unsigned_wraps_and_floats_add() {
        let mut mem = u64::MAX.to_ne_bytes().to_vec();
        apply(
            AtomicOp::Sum,
            Datatype::U64,
            &mut mem,
            &2u64.to_ne_bytes(),
            &[],
        );
        assert_eq!(u64::from_ne_bytes(mem.try_into().unwrap()), 1);
        let mut mem = 1.5f64.to_ne_bytes().to_vec();
        apply(
            AtomicOp::Prod,
            Datatype::F64,
            &mut mem,
            &4.0f64.to_ne_bytes(),
            &[],
        );
        assert_eq!(f64::from_ne_bytes(mem.try_into().unwrap()), 6.0);
        assert!(!AtomicOp::Bor.supports(Datatype::F32));
        assert!(AtomicOp::Cswap.supports(Datatype::F32));
        assert_eq!(AtomicOp::from_code(18), Some(AtomicOp::Mswap));
        assert_eq!(Datatype::from_code(12), None, "long double not implemented");
    }
}
