"""The budgets `pycage.Runtime` takes, generated from pycage-runtime's
budgets table (crates/pycage-runtime/src/budgets.rs). Do not edit: run
`PYCAGE_BLESS=1 cargo test -p pycage-runtime --test generated`.

Each entry: keyword -> (config field, keyword unit, field unit, size of
one keyword unit and of one field unit in their base unit (bytes,
milliseconds, one), minimum and maximum (None: none) in the field's
unit, default in the field's unit, whether one run may override it).
"""

BUDGETS = {
    "wall_seconds": ("wall_time", "s", "ms", 1000, 1, 1, None, 60000, True),
    "cpu_seconds": ("cpu_seconds", "s", "s", 1000, 1000, 1, None, 30, True),
    "address_space_bytes": ("address_space_bytes", "bytes", "bytes", 1, 1, 67108864, None, 536870912, True),
    "max_log_bytes": ("max_log_bytes", "bytes", "bytes", 1, 1, 0, None, 65536, False),
    "max_value_bytes": ("max_value_bytes", "bytes", "bytes", 1, 1, 1, None, 1048576, False),
    "max_display_bytes": ("max_display_bytes", "bytes", "bytes", 1, 1, 0, None, 8388608, False),
    "max_line_bytes": ("max_line_bytes", "bytes", "bytes", 1, 1, 1024, 1099511627776, 8388608, False),
    "max_control_bytes": ("max_control_bytes", "bytes", "bytes", 1, 1, 1024, None, 67108864, False),
    "grace_seconds": ("grace", "s", "ms", 1000, 1, 0, 60000, 250, False),
    "max_processes": ("max_processes", "count", "count", 1, 1, 1, 4194304, 256, False),
    "max_file_bytes": ("max_file_bytes", "bytes", "bytes", 1, 1, 0, None, 67108864, False),
    "max_open_files": ("max_open_files", "count", "count", 1, 1, 16, 1048576, 256, False),
    "disk_bytes": ("disk_bytes", "bytes", "bytes", 1, 1, 1048576, None, 268435456, False),
    "max_output_bytes": ("max_output_bytes", "bytes", "bytes", 1, 1, 0, None, 67108864, False),
    "max_journal_bytes": ("max_journal_bytes", "bytes", "bytes", 1, 1, 4096, None, 16777216, False),
    "max_calls_in_flight": ("max_calls_in_flight", "count", "count", 1, 1, 1, 65536, 256, False),
    "max_unread_reply_bytes": ("max_unread_reply_bytes", "bytes", "bytes", 1, 1, 262144, None, 16777216, False),
    "max_buffered_events": ("max_buffered_events", "count", "count", 1, 1, 1, 1048576, 1024, False),
    "max_net_bytes": ("max_net_bytes", "bytes", "bytes", 1, 1, 1, None, 67108864, False),
    "max_net_connections": ("max_net_connections", "count", "count", 1, 1, 1, 4096, 64, False),
    "install_seconds": ("install_timeout", "s", "ms", 1000, 1, 1000, None, 300000, False),
    "package_cache_bytes": ("package_cache_bytes", "bytes", "bytes", 1, 1, 1048576, None, 2147483648, False),
    "max_concurrent_runs": ("max_concurrent_runs", "count", "count", 1, 1, 1, 1048576, 64, False),
    "pool_size": ("pool_size", "count", "count", 1, 1, 0, 1024, 4, False),
    "zygote_max_runs": ("zygote_max_runs", "count", "count", 1, 1, 1, None, 1000, False),
    "zygote_max_age_seconds": ("zygote_max_age", "s", "ms", 1000, 1, 1, None, 300000, False),
}
