"""What the planner knows about Spark SQL's built-in functions.

The name lists were taken from Spark 4.2's function registry (`FunctionRegistry.builtin`, grouped
by `ExpressionInfo.getGroup`). A function that is not built in is a user-defined function: the
planner cannot know whether it is deterministic or an aggregate, so it keeps such models on the
recompute path.
"""

from __future__ import annotations

AGGREGATE_FUNCTIONS = frozenset(
    (
    'any', 'any_value', 'approx_count_distinct', 'approx_percentile', 'approx_top_k',
    'approx_top_k_accumulate', 'approx_top_k_combine', 'array_agg', 'avg', 'bit_and', 'bit_or',
    'bit_xor', 'bitmap_and_agg', 'bitmap_construct_agg', 'bitmap_or_agg', 'bool_and', 'bool_or',
    'collect_list', 'collect_set', 'corr', 'count', 'count_if', 'count_min_sketch', 'covar_pop',
    'covar_samp', 'every', 'first', 'first_value', 'grouping', 'grouping_id',
    'histogram_numeric', 'hll_sketch_agg', 'hll_union_agg', 'kll_merge_agg_bigint',
    'kll_merge_agg_double', 'kll_merge_agg_float', 'kll_sketch_agg_bigint',
    'kll_sketch_agg_double', 'kll_sketch_agg_float', 'kurtosis', 'last', 'last_value',
    'listagg', 'max', 'max_by', 'mean', 'measure', 'median', 'min', 'min_by', 'mode',
    'percentile', 'percentile_approx', 'percentile_cont', 'percentile_disc', 'regr_avgx',
    'regr_avgy', 'regr_count', 'regr_intercept', 'regr_r2', 'regr_slope', 'regr_sxx',
    'regr_sxy', 'regr_syy', 'skewness', 'some', 'std', 'stddev', 'stddev_pop', 'stddev_samp',
    'string_agg', 'sum', 'theta_intersection_agg', 'theta_sketch_agg', 'theta_union_agg',
    'try_avg', 'try_sum', 'tuple_intersection_agg_double', 'tuple_intersection_agg_integer',
    'tuple_sketch_agg_double', 'tuple_sketch_agg_integer', 'tuple_union_agg_double',
    'tuple_union_agg_integer', 'var_pop', 'var_samp', 'variance'
    )
)

WINDOW_ONLY_FUNCTIONS = frozenset(
    (
    'cume_dist', 'dense_rank', 'lag', 'lead', 'nth_value', 'ntile', 'percent_rank', 'rank',
    'row_number'
    )
)

# Functions whose result differs between two evaluations over the same rows, or depends on where
# and when the query runs rather than on the rows: the delta of a query using them is not the
# difference of two evaluations. `unix_timestamp` is only listed for its zero-argument form
# (see `is_nondeterministic_call`).
NONDETERMINISTIC_FUNCTIONS = frozenset(
    (
        "rand", "randn", "random", "randstr", "uniform", "uuid", "shuffle",
        "monotonically_increasing_id", "spark_partition_id", "input_file_name",
        "input_file_block_start", "input_file_block_length", "current_date", "curdate",
        "current_timestamp", "current_time", "now", "localtimestamp", "current_timezone",
        "current_user", "user", "session_user", "current_catalog", "current_database",
        "current_schema", "current_path", "reflect", "java_method", "try_reflect",
    )
)

# Grouping by these merges rows depending on other rows, so a group of the delta is not a group of
# the whole input.
NON_PER_ROW_GROUPINGS = frozenset(("session_window",))

BUILTIN_FUNCTIONS = frozenset(
    (
    '!', '%', '&', '*', '+', '-', '/', '<', '<<', '<=', '<=>', '=', '==', '>', '>=', '>>',
    '>>>', '^', 'abs', 'acos', 'acosh', 'add_months', 'aes_decrypt', 'aes_encrypt', 'aggregate',
    'and', 'approx_top_k_estimate', 'array', 'array_append', 'array_compact', 'array_contains',
    'array_distinct', 'array_except', 'array_insert', 'array_intersect', 'array_join',
    'array_max', 'array_min', 'array_position', 'array_prepend', 'array_remove', 'array_repeat',
    'array_size', 'array_sort', 'array_union', 'arrays_overlap', 'arrays_zip', 'ascii', 'asin',
    'asinh', 'assert_true', 'atan', 'atan2', 'atanh', 'base64', 'between', 'bigint', 'bin',
    'binary', 'bit_count', 'bit_get', 'bit_length', 'bitmap_bit_position',
    'bitmap_bucket_number', 'bitmap_count', 'boolean', 'bround', 'btrim', 'cardinality', 'cast',
    'cbrt', 'ceil', 'ceiling', 'char', 'char_length', 'character_length', 'chr', 'coalesce',
    'collate', 'collation', 'concat', 'concat_ws', 'contains', 'conv', 'convert_timezone',
    'cos', 'cosh', 'cot', 'crc32', 'csc', 'cume_dist', 'curdate', 'current_catalog',
    'current_database', 'current_date', 'current_path', 'current_schema', 'current_time',
    'current_timestamp', 'current_timezone', 'current_user', 'date', 'date_add', 'date_diff',
    'date_format', 'date_from_unix_date', 'date_part', 'date_sub', 'date_trunc', 'dateadd',
    'datediff', 'datepart', 'day', 'dayname', 'dayofmonth', 'dayofweek', 'dayofyear', 'decimal',
    'decode', 'degrees', 'dense_rank', 'div', 'double', 'e', 'element_at', 'elt', 'encode',
    'endswith', 'equal_null', 'exists', 'exp', 'explode', 'explode_outer', 'expm1', 'extract',
    'factorial', 'filter', 'find_in_set', 'flatten', 'float', 'floor', 'forall',
    'format_number', 'format_string', 'from_avro', 'from_csv', 'from_json', 'from_protobuf',
    'from_unixtime', 'from_utc_timestamp', 'from_xml', 'get', 'get_json_object', 'getbit',
    'greatest', 'hash', 'hex', 'hll_sketch_estimate', 'hll_union', 'hour', 'hypot', 'if',
    'ifnull', 'ilike', 'in', 'initcap', 'inline', 'inline_outer', 'input_file_block_length',
    'input_file_block_start', 'input_file_name', 'instr', 'int', 'is_valid_utf8',
    'is_valid_variant', 'is_variant_null', 'isnan', 'isnotnull', 'isnull', 'java_method',
    'json_array_length', 'json_object_keys', 'json_tuple', 'kll_sketch_get_n_bigint',
    'kll_sketch_get_n_double', 'kll_sketch_get_n_float', 'kll_sketch_get_quantile_bigint',
    'kll_sketch_get_quantile_double', 'kll_sketch_get_quantile_float',
    'kll_sketch_get_rank_bigint', 'kll_sketch_get_rank_double', 'kll_sketch_get_rank_float',
    'kll_sketch_merge_bigint', 'kll_sketch_merge_double', 'kll_sketch_merge_float',
    'kll_sketch_to_string_bigint', 'kll_sketch_to_string_double', 'kll_sketch_to_string_float',
    'lag', 'last_day', 'lcase', 'lead', 'least', 'left', 'len', 'length', 'levenshtein', 'like',
    'ln', 'localtimestamp', 'locate', 'log', 'log10', 'log1p', 'log2', 'lower', 'lpad', 'ltrim',
    'luhn_check', 'make_date', 'make_dt_interval', 'make_interval', 'make_time',
    'make_timestamp', 'make_timestamp_ltz', 'make_timestamp_ntz', 'make_valid_utf8',
    'make_ym_interval', 'map', 'map_concat', 'map_contains_key', 'map_entries', 'map_filter',
    'map_from_arrays', 'map_from_entries', 'map_keys', 'map_values', 'map_zip_with', 'mask',
    'md5', 'minute', 'mod', 'monotonically_increasing_id', 'month', 'monthname',
    'months_between', 'named_struct', 'nanvl', 'negative', 'next_day', 'not', 'now',
    'nth_value', 'ntile', 'nullif', 'nullifzero', 'nvl', 'nvl2', 'octet_length', 'or',
    'overlay', 'parse_json', 'parse_url', 'percent_rank', 'pi', 'pmod', 'posexplode',
    'posexplode_outer', 'position', 'positive', 'pow', 'power', 'printf', 'quarter', 'quote',
    'radians', 'raise_error', 'rand', 'randn', 'random', 'randstr', 'rank', 'reduce', 'reflect',
    'regexp', 'regexp_count', 'regexp_extract', 'regexp_extract_all', 'regexp_instr',
    'regexp_like', 'regexp_replace', 'regexp_substr', 'repeat', 'replace', 'reverse', 'right',
    'rint', 'rlike', 'round', 'row_number', 'rpad', 'rtrim', 'schema_of_avro', 'schema_of_csv',
    'schema_of_json', 'schema_of_variant', 'schema_of_variant_agg', 'schema_of_xml', 'sec',
    'second', 'sentences', 'sequence', 'session_user', 'session_window', 'sha', 'sha1', 'sha2',
    'shiftleft', 'shiftright', 'shiftrightunsigned', 'shuffle', 'sign', 'signum', 'sin', 'sinh',
    'size', 'slice', 'smallint', 'sort_array', 'soundex', 'space', 'spark_partition_id',
    'split', 'split_part', 'sqrt', 'st_asbinary', 'st_geogfromwkb', 'st_geomfromwkb',
    'st_setsrid', 'st_srid', 'stack', 'startswith', 'str_to_map', 'string', 'struct', 'substr',
    'substring', 'substring_index', 'tan', 'tanh', 'theta_difference', 'theta_intersection',
    'theta_sketch_estimate', 'theta_union', 'time', 'time_bucket', 'time_diff',
    'time_from_micros', 'time_from_millis', 'time_from_seconds', 'time_to_micros',
    'time_to_millis', 'time_to_seconds', 'time_trunc', 'timestamp', 'timestamp_micros',
    'timestamp_millis', 'timestamp_seconds', 'tinyint', 'to_avro', 'to_binary', 'to_char',
    'to_csv', 'to_date', 'to_json', 'to_number', 'to_protobuf', 'to_time', 'to_timestamp',
    'to_timestamp_ltz', 'to_timestamp_ntz', 'to_unix_timestamp', 'to_utc_timestamp',
    'to_varchar', 'to_variant_object', 'to_xml', 'transform', 'transform_keys',
    'transform_values', 'translate', 'trim', 'trunc', 'try_add', 'try_aes_decrypt',
    'try_divide', 'try_element_at', 'try_make_interval', 'try_make_timestamp',
    'try_make_timestamp_ltz', 'try_make_timestamp_ntz', 'try_mod', 'try_multiply',
    'try_parse_json', 'try_parse_url', 'try_reflect', 'try_subtract', 'try_to_binary',
    'try_to_date', 'try_to_number', 'try_to_time', 'try_to_timestamp', 'try_url_decode',
    'try_validate_utf8', 'try_variant_get', 'tuple_difference_double',
    'tuple_difference_integer', 'tuple_difference_theta_double',
    'tuple_difference_theta_integer', 'tuple_intersection_double', 'tuple_intersection_integer',
    'tuple_intersection_theta_double', 'tuple_intersection_theta_integer',
    'tuple_sketch_estimate_double', 'tuple_sketch_estimate_integer',
    'tuple_sketch_summary_double', 'tuple_sketch_summary_integer', 'tuple_sketch_theta_double',
    'tuple_sketch_theta_integer', 'tuple_union_double', 'tuple_union_integer',
    'tuple_union_theta_double', 'tuple_union_theta_integer', 'typeof', 'ucase', 'unbase64',
    'unhex', 'uniform', 'unix_date', 'unix_micros', 'unix_millis', 'unix_seconds',
    'unix_timestamp', 'upper', 'url_decode', 'url_encode', 'user', 'uuid', 'validate_utf8',
    'variant_get', 'vector_avg', 'vector_cosine_similarity', 'vector_inner_product',
    'vector_l2_distance', 'vector_norm', 'vector_normalize', 'vector_sum', 'version', 'weekday',
    'weekofyear', 'when', 'width_bucket', 'window', 'window_time', 'xpath', 'xpath_boolean',
    'xpath_double', 'xpath_float', 'xpath_int', 'xpath_long', 'xpath_number', 'xpath_short',
    'xpath_string', 'xxhash64', 'year', 'zeroifnull', 'zip_with', '|', '~'
    )
) | AGGREGATE_FUNCTIONS
