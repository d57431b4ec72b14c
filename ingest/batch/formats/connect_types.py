"""Kafka Connect's and Debezium's logical types -> the declared column's Spark value, or why not.

Debezium writes a column's value by its own encoding, not by the column's SQL
type: a `DECIMAL(19,2)` is the base64 of the unscaled big-endian two's-complement
integer (`"D54="` is 39.98), a `TIMESTAMP(6)` a long of microseconds, a
`DATE` an int of days. The JSON converter with `schemas.enable=true` names the
encoding of every field (`org.apache.kafka.connect.data.Decimal` with its
`scale`, `io.debezium.time.MicroTimestamp`, ...); a bare payload does not, so
the declared type decides, with `cdc.encodings` naming a column's encoding where
the type alone cannot tell (docs/cdc.md has the table).

Each column is read from the JSON as its text (Spark's JSON reader gives any
value as text to a STRING field) and converted here by that encoding. A value the
column cannot hold exactly (a malformed base64, a decimal with more digits than
the column, a timestamp outside years 1-9999, ...) gives a reason naming the
column, the value and the encoding expected: the change is a `decode` dead
letter, never a silently different value.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

CONNECT = "org.apache.kafka.connect.data."
DEBEZIUM_TIME = "io.debezium.time."
DECIMAL = CONNECT + "Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
# a decimal written as text (decimal.handling.mode=string) or a JSON number (=double)
TEXT_DECIMAL = ("string", "double")

# the long/int encodings of an instant or a date, and how many of their unit make a second
TIMESTAMP_UNITS = {CONNECT + "Timestamp": 1_000, DEBEZIUM_TIME + "Timestamp": 1_000,
                   DEBEZIUM_TIME + "MicroTimestamp": 1_000_000,
                   DEBEZIUM_TIME + "NanoTimestamp": 1_000_000_000}
DATE_NAMES = (CONNECT + "Date", DEBEZIUM_TIME + "Date")
TIME_UNITS = {CONNECT + "Time": 1_000, DEBEZIUM_TIME + "Time": 1_000,
              DEBEZIUM_TIME + "MicroTime": 1_000_000, DEBEZIUM_TIME + "NanoTime": 1_000_000_000}
ZONED_TIMESTAMP = DEBEZIUM_TIME + "ZonedTimestamp"
# names whose value is already the text a STRING column keeps
TEXT_NAMES = (DEBEZIUM_TIME + "ZonedTime", "io.debezium.data.Json", "io.debezium.data.Uuid",
              "io.debezium.data.Enum", "io.debezium.data.EnumSet", "io.debezium.data.Xml")
YEAR = DEBEZIUM_TIME + "Year"
BITS = "io.debezium.data.Bits"

# every name above: what `cdc.encodings` accepts (spec/model.py lists them without pyspark)
ENCODINGS = (DECIMAL, VARIABLE_SCALE_DECIMAL, *TEXT_DECIMAL, *TIMESTAMP_UNITS, *DATE_NAMES,
             *TIME_UNITS, ZONED_TIMESTAMP, *TEXT_NAMES, YEAR, BITS)

# years 1-9999 (what Spark and Delta hold) in microseconds and days since the epoch
MIN_MICROS = -62_135_596_800_000_000
MAX_MICROS = 253_402_300_799_999_999
MIN_DAYS = -719_162
MAX_DAYS = 2_932_896
MICROS_PER_DAY = 86_400_000_000

_SHOWN = 80  # characters of a value quoted in a reason


@dataclass(frozen=True)
class Field:
    """One column's text in the image and what the message's schema says of it (null if nothing)."""

    name: str
    text: Column
    logical: Column  # the schema's `name` (org.apache.kafka.connect.data.Decimal, ...)
    kind: Column  # the schema's `type` (bytes, int64, string, ...)
    scale: Column  # the schema's parameters.scale, as text
    connector: Column | None = None  # the envelope's source.connector (postgresql, mysql, ...)


@dataclass(frozen=True)
class Converted:
    value: Column
    reason: Column  # null when the text became the value (or was null)


class Parts:
    """Named parts of the columns being built, each computed in a step before the steps that
    read it (the steps are projections, one after another). A part an expression uses in
    several places is then computed once, and not copied into each place: written inline, a
    decimal's conversion copied its digits 32 times over, and Spark analyzes and optimizes
    every copy again for every batch (a DECIMAL, a TIMESTAMP and a DATE column made a plan
    of 700,000 characters, 8 seconds of a batch)."""

    def __init__(self, prefix: str):
        self._prefix = prefix
        self.steps: list[dict[str, Column]] = []
        self._step_of: dict[int, int] = {}
        self._parts: list[Column] = []  # kept, so the ids above stay theirs

    def name(self, expr: Column, *reads: Column) -> Column:
        """`expr` as a part, in the step after those of the parts it `reads`."""
        step = 1 + max((self._step_of.get(id(read), -1) for read in reads), default=-1)
        while len(self.steps) <= step:
            self.steps.append({})
        name = f"{self._prefix}{len(self._parts)}"
        self.steps[step][name] = expr
        part = F.col(name)
        self._step_of[id(part)] = step
        self._parts.append(part)
        return part


def convert(field: Field, declared: T.DataType, encoding: str | None, parts: Parts) -> Converted:
    """The column's value by the message's encoding, else `encoding` (cdc.encodings), else
    the declared type's default; and a reason when a non-null text does not fit. What the
    value and reason read is in `parts`, computed in the steps before them."""
    named = parts.name(F.coalesce(field.logical, F.lit(encoding), _from_kind(field.kind, declared)))
    if isinstance(declared, T.DecimalType):
        return _decimal(field, declared, named, parts)
    if isinstance(declared, (T.TimestampType, T.TimestampNTZType)):
        return _timestamp(field, declared, named, parts)
    if isinstance(declared, T.DateType):
        return _date(field, named, parts)
    if isinstance(declared, T.StringType) and encoding == VARIABLE_SCALE_DECIMAL:
        return _variable_scale_text(field, parts)
    if isinstance(declared, T.StringType):
        return _text(field, named, parts)
    if isinstance(declared, T.BinaryType):
        value = F.try_to_binary(field.text, F.lit("base64"))
        return _checked(field, value, F.lit("bytes (base64, binary.handling.mode=base64 or bytes)"))
    if isinstance(declared, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
                             T.BooleanType)):
        return _checked(field, field.text.try_cast(declared), F.lit(f"a JSON {declared.simpleString()}"))
    if isinstance(declared, (T.StructType, T.ArrayType, T.MapType)):
        return _checked(field, F.from_json(field.text, declared.simpleString()),
                        F.lit(f"JSON of type {declared.simpleString()}"))
    return Converted(field.text.cast(declared), F.lit(None).cast("string"))


def _from_kind(kind: Column, declared: T.DataType) -> Column:
    """Without a logical name, the schema's plain type says how a decimal is written."""
    if isinstance(declared, T.DecimalType):
        return (F.when(kind == "bytes", F.lit(DECIMAL))
                .when(kind.isin("string"), F.lit("string"))
                .when(kind.isin("double", "float64", "float32", "int64", "int32"), F.lit("double")))
    return F.lit(None).cast("string")


def _checked(field: Field, value: Column, expected: Column) -> Converted:
    failed = field.text.isNotNull() & value.isNull()
    return Converted(value, F.when(failed, _reason(field, expected)))


def _reason(field: Field, expected: Column, why: str = "is not") -> Column:
    shown = F.when(F.length(field.text) > _SHOWN, F.concat(F.substring(field.text, 1, _SHOWN),
                                                            F.lit("...")))\
        .otherwise(field.text)
    return F.format_string(f"column {field.name}: value '%s' {why} %s", shown, expected)


# --- decimals -----------------------------------------------------------------------

def _decimal(field: Field, declared: T.DecimalType, named: Column, parts: Parts) -> Converted:
    precise = parts.name(F.coalesce(named, F.lit(DECIMAL)), named)
    scale = parts.name(F.coalesce(field.scale.try_cast("int"), F.lit(declared.scale)))
    variable = parts.name(F.from_json(field.text, "scale INT, value STRING"))
    # each only where its encoding is the one: computed in steps, neither is left out by the CASE below
    fixed = _unscaled_text(F.when(precise == DECIMAL, field.text), scale, parts, precise, scale)
    varying = _unscaled_text(F.when(precise == VARIABLE_SCALE_DECIMAL, variable["value"]), variable["scale"],
                             parts, precise, variable)
    decimal_text = parts.name(
        F.when(precise == DECIMAL, fixed)
        .when(precise == VARIABLE_SCALE_DECIMAL, varying)
        .when(precise.isin(*TEXT_DECIMAL), _plain_decimal(field.text)), precise, fixed, varying)
    value = decimal_text.try_cast(declared)
    exact = _fits_scale(decimal_text, declared.scale)
    expected = (F.when(precise == DECIMAL, F.format_string(
        f"{DECIMAL} (base64 of the unscaled two's-complement integer, scale %s, "
        f"decimal.handling.mode=precise) fitting {declared.simpleString()}", scale))
        .when(precise == VARIABLE_SCALE_DECIMAL, F.lit(
            f"{VARIABLE_SCALE_DECIMAL} ({{scale, value}}) fitting {declared.simpleString()}"))
        .when(precise.isin(*TEXT_DECIMAL), F.lit(
            f"a decimal number (decimal.handling.mode=string or double) fitting "
            f"{declared.simpleString()}"))
        .otherwise(F.format_string(f"a decimal encoding (%s is not one) fitting "
                                   f"{declared.simpleString()}", precise)))
    failed = field.text.isNotNull() & (value.isNull() | ~F.coalesce(exact, F.lit(False)))
    return Converted(F.when(~failed, value), F.when(failed, _reason(field, expected)))


def _unscaled_text(base64: Column, scale: Column, parts: Parts, *reads: Column) -> Column:
    """The decimal text of a base64 big-endian two's-complement integer at `scale`; null if
    the base64 is malformed or the integer has more than 38 digits. `reads`: the parts
    `base64` and `scale` read."""
    raw = parts.name(F.hex(F.try_to_binary(base64, F.lit("base64"))), *reads)
    negative = parts.name(F.substring(raw, 1, 1).isin(*"89ABCDEF"), raw)
    # a negative number is -(~bits + 1): the inverted digits keep the magnitude in DECIMAL(38)
    digits = F.transform(F.split(raw, ""), lambda h: F.conv(h, 16, 10).cast("int"))
    digits = parts.name(F.when(negative, F.transform(digits, lambda d: F.lit(15) - d)).otherwise(digits),
                        raw, negative)
    zero = F.lit(0).cast("decimal(38,0)")
    summed = parts.name(F.aggregate(digits, zero, lambda acc, d: F.try_add(
        F.try_multiply(acc, F.lit(16).cast("decimal(38,0)")), d.cast("decimal(38,0)")).cast(
        "decimal(38,0)")), digits)
    magnitude = F.when(negative, F.try_add(summed, F.lit(1).cast("decimal(38,0)")).cast(
        "decimal(38,0)")).otherwise(summed)
    unscaled = parts.name(F.when(F.length(raw) > 0, magnitude.cast("string")), raw, negative, summed)
    padded = parts.name(F.lpad(unscaled, F.greatest(F.length(unscaled), scale + 1), "0"), unscaled, *reads)
    whole = F.substring(padded, F.lit(1), F.length(padded) - scale)
    point = F.when(scale > 0, F.concat(F.lit("."), F.substring(padded, F.length(padded) - scale + 1,
                                                                 scale))).otherwise(F.lit(""))
    text = F.concat(F.when(negative, F.lit("-")).otherwise(F.lit("")), whole, point)
    return parts.name(F.when(unscaled.isNotNull() & (scale >= 0), text), negative, unscaled, padded, *reads)


def _variable_scale_text(field: Field, parts: Parts) -> Converted:
    """A VariableScaleDecimal into a STRING column (its scale varies from value to value, so no
    DECIMAL(p,s) holds every one): its exact decimal text, as the Avro path writes it."""
    variable = parts.name(F.from_json(field.text, "scale INT, value STRING"))
    value = _unscaled_text(variable["value"], variable["scale"], parts, variable)
    return _checked(field, value, F.lit(f"{VARIABLE_SCALE_DECIMAL} ({{scale, value}}) of at most 38 digits"))


def _plain_decimal(text: Column) -> Column:
    """A number written as text: plain or scientific; its exact digits as BigDecimal would."""
    return F.when(text.rlike(r"^-?[0-9]+(\.[0-9]+)?$"), text).otherwise(
        text.try_cast("decimal(38,18)").cast("string"))


def _fits_scale(decimal_text: Column, scale: int) -> Column:
    """No digit is lost by the column's scale (a cast would round it)."""
    fraction = F.regexp_extract(decimal_text, r"\.([0-9]*)$", 1)
    return F.length(F.regexp_replace(fraction, "0+$", "")) <= scale


# --- instants, dates and times of day -------------------------------------------------------

# A bare payload's number in a TIMESTAMP column, as each connector writes the column's default
# precision (time.precision.mode=adaptive): Postgres' and Oracle's TIMESTAMP(6) in microseconds,
# SQL Server's datetime2(7) in nanoseconds; MySQL's datetime (precision 0) and any other, ms
CONNECTOR_TIMESTAMPS = {"postgresql": DEBEZIUM_TIME + "MicroTimestamp", "oracle": DEBEZIUM_TIME + "MicroTimestamp",
                        "sqlserver": DEBEZIUM_TIME + "NanoTimestamp"}
# the encoding an epoch number's magnitude fits for an instant after 1973 (the digits of a
# present-day count: 13 in milliseconds, 16 in microseconds, 19 in nanoseconds)
_MAGNITUDES = ((10 ** 17, DEBEZIUM_TIME + "NanoTimestamp"), (10 ** 14, DEBEZIUM_TIME + "MicroTimestamp"))


def _connector_default(connector: Column | None) -> Column:
    default = F.lit(DEBEZIUM_TIME + "Timestamp")
    if connector is None:
        return default
    for name, encoding in reversed(CONNECTOR_TIMESTAMPS.items()):
        default = F.when(connector == name, F.lit(encoding)).otherwise(default)
    return default


def _by_magnitude(number: Column) -> Column:
    size = F.abs(number.cast("decimal(20,0)"))
    fits = F.lit(DEBEZIUM_TIME + "Timestamp")
    for least, encoding in reversed(_MAGNITUDES):
        fits = F.when(size >= least, F.lit(encoding)).otherwise(fits)
    return F.when(number.isNotNull(), fits)


def _timestamp(field: Field, declared: T.DataType, named: Column, parts: Parts) -> Converted:
    # Without a name (a bare payload, no cdc.encodings) the connector's default applies, guarded:
    # a number whose magnitude is another unit's is a dead letter, never a plausible, wrong date
    # (milliseconds read as microseconds land in January 1970)
    encoding = parts.name(F.coalesce(named, _connector_default(field.connector)), named)
    number = parts.name(field.text.try_cast("bigint"))
    fits = parts.name(_by_magnitude(number), number)
    unsure = named.isNull() & (number != 0) & (fits != encoding)
    micros = parts.name(_micros_by_encoding(number, encoding, TIMESTAMP_UNITS), number, encoding)
    in_range = micros.between(MIN_MICROS, MAX_MICROS)
    instant = F.when(in_range, F.timestamp_micros(micros))
    if isinstance(declared, T.TimestampNTZType):
        instant = _utc_wall_clock(parts.name(F.when(in_range, micros), micros), parts)
    # ZonedTimestamp and ISO text: an instant with its offset, read as Spark casts it
    iso = field.text.try_cast(declared)
    value = parts.name(F.when(number.isNull(), iso).when(~unsure, instant), number, micros, instant, fits, encoding)
    expected = F.when(number.isNull(), F.format_string(
        f"{ZONED_TIMESTAMP} (ISO-8601 text) or an epoch number as %s", encoding)).otherwise(
        F.format_string("%s (%s since the epoch) within years 1-9999", encoding, _unit(encoding)))
    why = F.when(number.isNotNull() & micros.isNotNull(), F.lit("is outside years 1-9999 as"))
    failed = field.text.isNotNull() & value.isNull()
    reason = _reason(field, expected, "is not")
    out_of_range = _reason(field, F.format_string("%s (%s since the epoch)", encoding, _unit(encoding)),
                           "is outside years 1-9999 as")
    # what to set, where neither the message nor cdc.encodings names the encoding
    to_set = F.when(named.isNull() & (fits != encoding), F.format_string(
        f"; its magnitude is that of %s: set cdc.encodings.{field.name}: %s for the changes to come (those "
        "dead-lettered keep their bytes; `ingest replay` skips them)", fits, fits)).otherwise(F.lit(""))
    connector = F.lit("unknown") if field.connector is None else F.coalesce(field.connector, F.lit("unknown"))
    guessed = _reason(field, F.format_string(
        "%s (%s since the epoch), the %s connector's default for a bare payload", encoding, _unit(encoding),
        connector), "is not read as")
    return Converted(value, F.when(failed, F.concat(
        F.when(unsure, guessed).when(why.isNotNull(), out_of_range).otherwise(reason), to_set)))


def _micros_by_encoding(number: Column, encoding: Column, units: dict[str, int]) -> Column:
    """`number` in microseconds, scaled by the unit its encoding names (null for another encoding)."""
    names = iter(units.items())
    name, per_second = next(names)
    micros = F.when(encoding == name, _to_micros(number, per_second))
    for name, per_second in names:
        micros = micros.when(encoding == name, _to_micros(number, per_second))
    return micros


def _to_micros(number: Column, per_second: int) -> Column:
    """Microseconds since the epoch; nanoseconds are truncated to Spark's precision. Null
    where the number would overflow a long (it is outside any plausible year then)."""
    if per_second == 1_000_000:
        return number
    if per_second > 1_000_000:
        return floor_div(number, per_second // 1_000_000)
    bound = (2 ** 63 - 1) // (1_000_000 // per_second)
    return F.when(F.abs(number) <= bound, number * F.lit(1_000_000 // per_second))


def floor_div(number: Column, divisor: int) -> Column:
    """`number // divisor` of a BIGINT, exact: epoch nanoseconds and microseconds exceed 2^53,
    and through DOUBLE (`/`) a value near a whole unit came out a unit late. DECIMAL division
    keeps every digit of a BIGINT; floor rounds towards the past, as Python's `//`."""
    return F.floor(number.cast("decimal(19,0)") / F.lit(divisor).cast("decimal(19,0)")).cast("bigint")


def _unit(encoding: Column) -> Column:
    return (F.when(encoding.endswith("MicroTimestamp") | encoding.endswith("MicroTime"),
                   F.lit("microseconds"))
            .when(encoding.endswith("NanoTimestamp") | encoding.endswith("NanoTime"),
                  F.lit("nanoseconds"))
            .when(encoding.isin(*DATE_NAMES), F.lit("days"))
            .otherwise(F.lit("milliseconds")))


def _utc_wall_clock(micros: Column, parts: Parts) -> Column:
    """The TIMESTAMP_NTZ whose wall clock is the epoch count (a part) read in UTC (Debezium's
    local date-times are written so), whatever the session's time zone."""
    days = parts.name(floor_div(micros, MICROS_PER_DAY), micros)
    day = parts.name(F.date_add(F.lit("1970-01-01").cast("date"), days.cast("int")), days)
    of_day = parts.name(micros - days * F.lit(MICROS_PER_DAY), micros, days)
    seconds = (of_day % F.lit(60_000_000)).cast("decimal(16,6)") / F.lit(1_000_000)
    return parts.name(F.make_timestamp_ntz(F.year(day), F.month(day), F.dayofmonth(day),
                                           (of_day / F.lit(3_600_000_000)).cast("int"),
                                           (of_day % F.lit(3_600_000_000) / F.lit(60_000_000)).cast("int"),
                                           seconds.cast("decimal(8,6)")), day, of_day)


def _date(field: Field, named: Column, parts: Parts) -> Converted:
    number = parts.name(field.text.try_cast("int"))
    in_range = number.between(MIN_DAYS, MAX_DAYS)
    days = F.date_add(F.lit("1970-01-01").cast("date"), F.when(in_range, number))
    value = F.when(number.isNull(), field.text.try_cast("date")).otherwise(days)
    encoding = F.coalesce(named, F.lit(DEBEZIUM_TIME + "Date"))
    expected = F.format_string("%s (days since the epoch, years 1-9999) or ISO-8601 date text",
                               encoding)
    return _checked(field, value, expected)


def _text(field: Field, named: Column, parts: Parts) -> Converted:
    """A STRING column keeps the text, but a time of day written as a number becomes
    HH:mm:ss.ffffff (a Delta table has no TIME type)."""
    number = parts.name(field.text.try_cast("bigint"))
    of_day = parts.name(_micros_by_encoding(number, named, TIME_UNITS), number, named)
    valid = of_day.between(0, MICROS_PER_DAY)
    clock = F.format_string("%02d:%02d:%02d.%06d", (of_day / F.lit(3_600_000_000)).cast("int"),
                            (of_day % F.lit(3_600_000_000) / F.lit(60_000_000)).cast("int"),
                            (of_day % F.lit(60_000_000) / F.lit(1_000_000)).cast("int"),
                            (of_day % F.lit(1_000_000)).cast("int"))
    is_time = named.isin(*TIME_UNITS)
    value = F.when(is_time, F.when(valid, clock)).otherwise(field.text)
    failed = field.text.isNotNull() & is_time & ~F.coalesce(valid, F.lit(False))
    expected = F.format_string("%s (%s since midnight, under 24 hours)", named, _unit(named))
    return Converted(value, F.when(failed, _reason(field, expected)))
