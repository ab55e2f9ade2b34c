/*
 * nvidia-smi -q (text), -q -d SECTION,... and -q -x (XML) from one table: each row is one line of
 * the text and one element of the XML, with the getter (values.h) both print. The element order
 * and names are nvidia-smi 580's (qx-h100.xml, tests/data/nvidia-smi/qx); the text labels and
 * columns those of the public 580 -q cited in docs/reference/nvidia-smi.md. A layout change is a
 * row change here.
 */
#include <string.h>

#include "values.h"

/* -d sections */
enum {
    D_MEMORY = 1 << 0,
    D_UTILIZATION = 1 << 1,
    D_ECC = 1 << 2,
    D_TEMPERATURE = 1 << 3,
    D_POWER = 1 << 4,
    D_CLOCK = 1 << 5,
    D_COMPUTE = 1 << 6,
    D_PIDS = 1 << 7,
    D_PERFORMANCE = 1 << 8,
    D_SUPPORTED_CLOCKS = 1 << 9,
    D_PAGE_RETIREMENT = 1 << 10,
    D_ACCOUNTING = 1 << 11,
    D_ENCODER_STATS = 1 << 12,
    D_SUPPORTED_GPU_TARGET_TEMP = 1 << 13,
    D_VOLTAGE = 1 << 14,
    D_FBC_STATS = 1 << 15,
    D_ROW_REMAPPER = 1 << 16,
    D_GSP_FIRMWARE_VERSION = 1 << 17,
    D_POWER_SMOOTHING = 1 << 18,
    D_POWER_PROFILES = 1 << 19,
};

static const struct {
    const char *name;
    unsigned bit;
} section_names[] = {
    {"MEMORY", D_MEMORY}, {"UTILIZATION", D_UTILIZATION}, {"ECC", D_ECC}, {"TEMPERATURE", D_TEMPERATURE},
    {"POWER", D_POWER}, {"CLOCK", D_CLOCK}, {"COMPUTE", D_COMPUTE}, {"PIDS", D_PIDS},
    {"PERFORMANCE", D_PERFORMANCE}, {"SUPPORTED_CLOCKS", D_SUPPORTED_CLOCKS},
    {"PAGE_RETIREMENT", D_PAGE_RETIREMENT}, {"ACCOUNTING", D_ACCOUNTING}, {"ENCODER_STATS", D_ENCODER_STATS},
    {"SUPPORTED_GPU_TARGET_TEMP", D_SUPPORTED_GPU_TARGET_TEMP}, {"VOLTAGE", D_VOLTAGE},
    {"FBC_STATS", D_FBC_STATS}, {"ROW_REMAPPER", D_ROW_REMAPPER},
    {"GSP_FIRMWARE_VERSION", D_GSP_FIRMWARE_VERSION}, {"POWER_SMOOTHING", D_POWER_SMOOTHING},
    {"POWER_PROFILES", D_POWER_PROFILES},
};

enum {
    Q_XML = 1,    /* only in -q -x */
    Q_TEXT = 2,   /* only in -q */
    Q_DEEPER = 4, /* -q indents it one more level than -q -x nests it */
    Q_HEX = 8,    /* -q -x drops the 0x of the -q value */
    Q_PROBE = 16, /* a group whose getter fails prints as one N/A line, without its children */
    Q_MIG_INDEX = 32,
};

enum special { SP_NONE, SP_MIG_DEVICES, SP_SUPPORTED_CLOCKS, SP_PROCESSES, SP_ACCOUNTED };

struct qnode {
    unsigned char depth;
    unsigned char flags;
    unsigned section; /* depth 0: the -d sections it belongs to */
    const char *label;
    const char *tag;
    getter_fn *get; /* NULL with SP_NONE: a group */
    int arg;
    const char *suffix;
    enum special special;
};

#define V(d, label, tag, get, arg, suffix) {d, 0, 0, label, tag, get, arg, suffix, SP_NONE}
#define VF(d, flags, label, tag, get, arg, suffix) {d, flags, 0, label, tag, get, arg, suffix, SP_NONE}
#define VS(sec, label, tag, get, arg, suffix) {0, 0, sec, label, tag, get, arg, suffix, SP_NONE}
#define G(d, label, tag) {d, 0, 0, label, tag, NULL, 0, NULL, SP_NONE}
#define GS(sec, label, tag) {0, 0, sec, label, tag, NULL, 0, NULL, SP_NONE}
#define SP(sec, flags, label, tag, special) {0, flags, sec, label, tag, NULL, 0, NULL, special}
#define ECCE(d, label, tag, type, counter, loc)                                                               \
    V(d, label, tag, g_ecc_counter, ECC_ARG(type, counter, NVML_MEMORY_LOCATION_##loc), NULL)
#define CORR NVML_MEMORY_ERROR_TYPE_CORRECTED
#define UNC NVML_MEMORY_ERROR_TYPE_UNCORRECTED
#define VOL NVML_VOLATILE_ECC
#define AGG NVML_AGGREGATE_ECC

static const struct qnode gpu_nodes[] = {
    V(0, "Product Name", "product_name", g_name, 0, NULL),
    V(0, "Product Brand", "product_brand", g_brand, 0, NULL),
    V(0, "Product Architecture", "product_architecture", g_architecture, 0, NULL),
    V(0, "Display Mode", "display_mode", g_deprecated, 0, NULL),
    V(0, "Display Attached", "display_attached", g_enable, EN_DISPLAY_ATTACHED, NULL),
    V(0, "Display Active", "display_active", g_enable, EN_DISPLAY_ACTIVE, NULL),
    V(0, "Persistence Mode", "persistence_mode", g_enable, EN_PERSISTENCE, NULL),
    V(0, "Addressing Mode", "addressing_mode", g_addressing_mode, 0, NULL),
    G(0, "MIG Mode", "mig_mode"),
    V(1, "Current", "current_mig", g_mig_mode, 0, NULL),
    V(1, "Pending", "pending_mig", g_mig_mode, 1, NULL),
    SP(0, 0, "MIG Devices", "mig_devices", SP_MIG_DEVICES),
    VS(D_ACCOUNTING, "Accounting Mode", "accounting_mode", g_enable, EN_ACCOUNTING, NULL),
    VS(D_ACCOUNTING, "Accounting Mode Buffer Size", "accounting_mode_buffer_size", g_accounting_buffer, 0, NULL),
    G(0, "Driver Model", "driver_model"),
    V(1, "Current", "current_dm", g_driver_model, 0, NULL),
    V(1, "Pending", "pending_dm", g_driver_model, 1, NULL),
    V(0, "Serial Number", "serial", g_serial, 0, NULL),
    V(0, "GPU UUID", "uuid", g_uuid, 0, NULL),
    V(0, "GPU PDI", "pdi", g_pdi, 0, NULL),
    V(0, "Minor Number", "minor_number", g_minor, 0, NULL),
    V(0, "VBIOS Version", "vbios_version", g_vbios, 0, NULL),
    V(0, "MultiGPU Board", "multigpu_board", g_multigpu, 0, NULL),
    V(0, "Board ID", "board_id", g_board_id, 0, NULL),
    V(0, "Board Part Number", "board_part_number", g_board_part, 0, NULL),
    V(0, "GPU Part Number", "gpu_part_number", g_gpu_part, 0, NULL),
    V(0, "FRU Part Number", "gpu_fru_part_number", g_na, 0, NULL),
    G(0, "Platform Info", "platformInfo"),
    V(1, "Chassis Serial Number", "chassis_serial_number", g_platform, PLAT_CHASSIS, NULL),
    V(1, "Slot Number", "slot_number", g_platform, PLAT_SLOT, NULL),
    V(1, "Tray Index", "tray_index", g_platform, PLAT_TRAY, NULL),
    V(1, "Host ID", "host_id", g_platform, PLAT_HOST, NULL),
    V(1, "Peer Type", "peer_type", g_platform, PLAT_PEER, NULL),
    V(1, "Module Id", "module_id", g_platform, PLAT_MODULE, NULL),
    V(1, "GPU Fabric GUID", "gpu_fabric_guid", g_platform, PLAT_GUID, NULL),
    G(0, "Inforom Version", "inforom_version"),
    V(1, "Image Version", "img_version", g_inforom, -1, NULL),
    V(1, "OEM Object", "oem_object", g_inforom, NVML_INFOROM_OEM, NULL),
    V(1, "ECC Object", "ecc_object", g_inforom, NVML_INFOROM_ECC, NULL),
    V(1, "Power Management Object", "pwr_object", g_inforom, NVML_INFOROM_POWER, NULL),
    G(0, "Inforom BBX Object Flush", "inforom_bbx_flush"),
    V(1, "Latest Timestamp", "latest_timestamp", g_na, 0, NULL),
    V(1, "Latest Duration", "latest_duration", g_na, 0, NULL),
    G(0, "GPU Operation Mode", "gpu_operation_mode"),
    V(1, "Current", "current_gom", g_gom, 0, NULL),
    V(1, "Pending", "pending_gom", g_gom, 1, NULL),
    V(0, "GPU C2C Mode", "c2c_mode", g_c2c, 0, NULL),
    G(0, "GPU Virtualization Mode", "gpu_virtualization_mode"),
    V(1, "Virtualization Mode", "virtualization_mode", g_virtualization, 0, NULL),
    V(1, "Host VGPU Mode", "host_vgpu_mode", g_virtualization, 1, NULL),
    V(1, "vGPU Heterogeneous Mode", "vgpu_heterogeneous_mode", g_virtualization, 2, NULL),
    V(0, "GPU Recovery Action", "gpu_recovery_action", g_recovery_action, 0, NULL),
    VS(D_GSP_FIRMWARE_VERSION, "GSP Firmware Version", "gsp_firmware_version", g_gsp_version, 0, NULL),
    G(0, "IBMNPU", "ibmnpu"),
    V(1, "Relaxed Ordering Mode", "relaxed_ordering_mode", g_na, 0, NULL),
    G(0, "PCI", "pci"),
    VF(1, Q_HEX, "Bus", "pci_bus", g_pci, PCI_BUS, NULL),
    VF(1, Q_HEX, "Device", "pci_device", g_pci, PCI_DEVICE, NULL),
    VF(1, Q_HEX, "Domain", "pci_domain", g_pci, PCI_DOMAIN, NULL),
    VF(1, Q_HEX, "Base Classcode", "pci_base_class", g_pci_ext, 0, NULL),
    VF(1, Q_HEX, "Sub Classcode", "pci_sub_class", g_pci_ext, 1, NULL),
    VF(1, Q_HEX, "Device Id", "pci_device_id", g_pci, PCI_DEVICE_ID, NULL),
    V(1, "Bus Id", "pci_bus_id", g_bus_id, 0, NULL),
    VF(1, Q_HEX, "Sub System Id", "pci_sub_system_id", g_pci, PCI_SUBSYSTEM_ID, NULL),
    G(1, "GPU Link Info", "pci_gpu_link_info"),
    G(2, "PCIe Generation", "pcie_gen"),
    V(3, "Max", "max_link_gen", g_pcie_gen, GEN_MAX, NULL),
    V(3, "Current", "current_link_gen", g_pcie_gen, GEN_CURRENT, NULL),
    V(3, "Device Current", "device_current_link_gen", g_pcie_gen, GEN_GPU_CURRENT, NULL),
    V(3, "Device Max", "max_device_link_gen", g_pcie_gen, GEN_GPU_MAX, NULL),
    V(3, "Host Max", "max_host_link_gen", g_pcie_gen, GEN_HOST_MAX, NULL),
    G(2, "Link Width", "link_widths"),
    V(3, "Max", "max_link_width", g_pcie_width, 1, "x"),
    V(3, "Current", "current_link_width", g_pcie_width, 0, "x"),
    G(1, "Bridge Chip", "pci_bridge_chip"),
    V(2, "Type", "bridge_chip_type", g_na, 0, NULL),
    V(2, "Firmware", "bridge_chip_fw", g_na, 0, NULL),
    V(1, "Replays Since Reset", "replay_counter", g_replay, 0, NULL),
    V(1, "Replay Number Rollovers", "replay_rollover_counter", g_field, 95, NULL),
    V(1, "Tx Throughput", "tx_util", g_pcie_tput, NVML_PCIE_UTIL_TX_BYTES, " KB/s"),
    V(1, "Rx Throughput", "rx_util", g_pcie_tput, NVML_PCIE_UTIL_RX_BYTES, " KB/s"),
    V(1, "Atomic Caps Outbound", "atomic_caps_outbound", g_atomics, 0, NULL),
    V(1, "Atomic Caps Inbound", "atomic_caps_inbound", g_atomics, 1, NULL),
    V(0, "Fan Speed", "fan_speed", g_fan, 0, " %"),
    VS(D_PERFORMANCE, "Performance State", "performance_state", g_pstate, 0, NULL),
    GS(D_PERFORMANCE, "Clocks Event Reasons", "clocks_event_reasons"),
    V(1, "Idle", "clocks_event_reason_gpu_idle", g_event_reason, 0, NULL),
    V(1, "Applications Clocks Setting", "clocks_event_reason_applications_clocks_setting", g_event_reason, 1, NULL),
    V(1, "SW Power Cap", "clocks_event_reason_sw_power_cap", g_event_reason, 2, NULL),
    V(1, "HW Slowdown", "clocks_event_reason_hw_slowdown", g_event_reason, 3, NULL),
    VF(1, Q_DEEPER, "HW Thermal Slowdown", "clocks_event_reason_hw_thermal_slowdown", g_event_reason, 6, NULL),
    VF(1, Q_DEEPER, "HW Power Brake Slowdown", "clocks_event_reason_hw_power_brake_slowdown", g_event_reason, 7,
       NULL),
    V(1, "Sync Boost", "clocks_event_reason_sync_boost", g_event_reason, 4, NULL),
    V(1, "SW Thermal Slowdown", "clocks_event_reason_sw_thermal_slowdown", g_event_reason, 5, NULL),
    V(1, "Display Clock Setting", "clocks_event_reason_display_clocks_setting", g_event_reason, 8, NULL),
    GS(D_PERFORMANCE, "Clocks Event Reasons Counters", "clocks_event_reasons_counters"),
    V(1, "SW Power Capping", "clocks_event_reasons_counters_sw_power_cap", g_event_counter,
      NVML_FI_DEV_PERF_POLICY_POWER, " us"),
    V(1, "Sync Boost", "clocks_event_reasons_counters_sync_boost", g_event_counter,
      NVML_FI_DEV_PERF_POLICY_SYNC_BOOST, " us"),
    V(1, "SW Thermal Slowdown", "clocks_event_reasons_counters_sw_therm_slowdown", g_event_counter,
      NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, " us"),
    V(1, "HW Thermal Slowdown", "clocks_event_reasons_counters_hw_therm_slowdown", g_event_counter,
      NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, " us"),
    V(1, "HW Power Braking", "clocks_event_reasons_counters_hw_power_brake", g_event_counter,
      NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, " us"),
    VS(D_PERFORMANCE, "Sparse Operation Mode", "sparse_operation_mode", g_na, 0, NULL),
    GS(D_MEMORY, "FB Memory Usage", "fb_memory_usage"),
    V(1, "Total", "total", g_memory, MEM_TOTAL, " MiB"),
    V(1, "Reserved", "reserved", g_memory, MEM_RESERVED, " MiB"),
    V(1, "Used", "used", g_memory, MEM_USED, " MiB"),
    V(1, "Free", "free", g_memory, MEM_FREE, " MiB"),
    GS(D_MEMORY, "BAR1 Memory Usage", "bar1_memory_usage"),
    V(1, "Total", "total", g_bar1, MEM_TOTAL, " MiB"),
    V(1, "Used", "used", g_bar1, MEM_USED, " MiB"),
    V(1, "Free", "free", g_bar1, MEM_FREE, " MiB"),
    GS(D_MEMORY, "Conf Compute Protected Memory Usage", "cc_protected_memory_usage"),
    V(1, "Total", "total", g_protected_memory, MEM_TOTAL, " MiB"),
    V(1, "Used", "used", g_protected_memory, MEM_USED, " MiB"),
    V(1, "Free", "free", g_protected_memory, MEM_FREE, " MiB"),
    VS(D_COMPUTE, "Compute Mode", "compute_mode", g_compute_mode, 0, NULL),
    GS(D_UTILIZATION, "Utilization", "utilization"),
    V(1, "GPU", "gpu_util", g_util, 0, " %"),
    V(1, "Memory", "memory_util", g_util, 1, " %"),
    V(1, "Encoder", "encoder_util", g_engine_util, 0, " %"),
    V(1, "Decoder", "decoder_util", g_engine_util, 1, " %"),
    V(1, "JPEG", "jpeg_util", g_engine_util, 2, " %"),
    V(1, "OFA", "ofa_util", g_engine_util, 3, " %"),
    GS(D_ENCODER_STATS, "Encoder Stats", "encoder_stats"),
    V(1, "Active Sessions", "session_count", g_encoder_stats, 0, NULL),
    V(1, "Average FPS", "average_fps", g_encoder_stats, 1, NULL),
    V(1, "Average Latency", "average_latency", g_encoder_stats, 2, NULL),
    GS(D_FBC_STATS, "FBC Stats", "fbc_stats"),
    V(1, "Active Sessions", "session_count", g_fbc_stats, 0, NULL),
    V(1, "Average FPS", "average_fps", g_fbc_stats, 1, NULL),
    V(1, "Average Latency", "average_latency", g_fbc_stats, 2, NULL),
    G(0, "DRAM Encryption Mode", "dram_encryption_mode"),
    V(1, "Current", "current_dram_encryption", g_dram_encryption, 0, NULL),
    V(1, "Pending", "pending_dram_encryption", g_dram_encryption, 1, NULL),
    GS(D_ECC, "ECC Mode", "ecc_mode"),
    V(1, "Current", "current_ecc", g_enable, EN_ECC, NULL),
    V(1, "Pending", "pending_ecc", g_enable, EN_ECC_PENDING, NULL),
    GS(D_ECC, "ECC Errors", "ecc_errors"),
    G(1, "Volatile", "volatile"),
    ECCE(2, "SRAM Correctable", "sram_correctable", CORR, VOL, SRAM),
    V(2, "SRAM Uncorrectable Parity", "sram_uncorrectable_parity", g_sram, SRAM_VOL_PARITY, NULL),
    V(2, "SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded", g_sram, SRAM_VOL_SECDED, NULL),
    ECCE(2, "DRAM Correctable", "dram_correctable", CORR, VOL, DRAM),
    ECCE(2, "DRAM Uncorrectable", "dram_uncorrectable", UNC, VOL, DRAM),
    G(1, "Aggregate", "aggregate"),
    ECCE(2, "SRAM Correctable", "sram_correctable", CORR, AGG, SRAM),
    V(2, "SRAM Uncorrectable Parity", "sram_uncorrectable_parity", g_sram, SRAM_AGG_PARITY, NULL),
    V(2, "SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded", g_sram, SRAM_AGG_SECDED, NULL),
    ECCE(2, "DRAM Correctable", "dram_correctable", CORR, AGG, DRAM),
    ECCE(2, "DRAM Uncorrectable", "dram_uncorrectable", UNC, AGG, DRAM),
    V(2, "SRAM Threshold Exceeded", "sram_threshold_exceeded", g_sram, SRAM_THRESHOLD, NULL),
    G(1, "Aggregate Uncorrectable SRAM Sources", "aggregate_uncorrectable_sram_sources"),
    V(2, "SRAM L2", "sram_l2", g_sram, SRAM_L2, NULL),
    V(2, "SRAM SM", "sram_sm", g_sram, SRAM_SM, NULL),
    V(2, "SRAM Microcontroller", "sram_microcontroller", g_sram, SRAM_MCU, NULL),
    V(2, "SRAM PCIE", "sram_pcie", g_sram, SRAM_PCIE, NULL),
    V(2, "SRAM Other", "sram_other", g_sram, SRAM_OTHER, NULL),
    V(1, "Channel Repair Pending", "channel_repair_pending", g_repair, 0, NULL),
    V(1, "TPC Repair Pending", "tpc_repair_pending", g_repair, 1, NULL),
    GS(D_PAGE_RETIREMENT, "Retired Pages", "retired_pages"),
    VF(1, Q_TEXT, "Single Bit ECC", NULL, g_retired, 0, NULL),
    VF(1, Q_TEXT, "Double Bit ECC", NULL, g_retired, 1, NULL),
    {1, Q_XML, 0, NULL, "multiple_single_bit_retirement", NULL, 0, NULL, SP_NONE},
    V(2, NULL, "retired_count", g_retired, 0, NULL),
    V(2, NULL, "retired_pagelist", g_retired_list, 0, NULL),
    {1, Q_XML, 0, NULL, "double_bit_retirement", NULL, 0, NULL, SP_NONE},
    V(2, NULL, "retired_count", g_retired, 1, NULL),
    V(2, NULL, "retired_pagelist", g_retired_list, 1, NULL),
    V(1, "Pending Page Blacklist", "pending_blacklist", g_retired_pending, 0, NULL),
    VF(1, Q_XML, NULL, "pending_retirement", g_retired_pending, 0, NULL),
    {0, Q_PROBE, D_ROW_REMAPPER, "Remapped Rows", "remapped_rows", g_remapped, ROWS_CORR, NULL, SP_NONE},
    V(1, "Correctable Error", "remapped_row_corr", g_remapped, ROWS_CORR, NULL),
    V(1, "Uncorrectable Error", "remapped_row_unc", g_remapped, ROWS_UNC, NULL),
    V(1, "Pending", "remapped_row_pending", g_remapped, ROWS_PENDING, NULL),
    V(1, "Remapping Failure Occurred", "remapped_row_failure", g_remapped, ROWS_FAILURE, NULL),
    G(1, "Bank Remap Availability Histogram", "row_remapper_histogram"),
    V(2, "Max", "row_remapper_histogram_max", g_histogram, 0, " bank(s)"),
    V(2, "High", "row_remapper_histogram_high", g_histogram, 1, " bank(s)"),
    V(2, "Partial", "row_remapper_histogram_partial", g_histogram, 2, " bank(s)"),
    V(2, "Low", "row_remapper_histogram_low", g_histogram, 3, " bank(s)"),
    V(2, "None", "row_remapper_histogram_none", g_histogram, 4, " bank(s)"),
    GS(D_TEMPERATURE, "Temperature", "temperature"),
    V(1, "GPU Current Temp", "gpu_temp", g_temperature, 0, " C"),
    V(1, "GPU T.Limit Temp", "gpu_temp_tlimit", g_temperature_margin, 0, " C"),
    V(1, "GPU Shutdown T.Limit Temp", "gpu_temp_max_tlimit_threshold", g_threshold_tlimit,
      NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, " C"),
    V(1, "GPU Slowdown T.Limit Temp", "gpu_temp_slow_tlimit_threshold", g_threshold_tlimit,
      NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, " C"),
    V(1, "GPU Max Operating T.Limit Temp", "gpu_temp_max_gpu_tlimit_threshold", g_threshold_tlimit,
      NVML_TEMPERATURE_THRESHOLD_GPU_MAX, " C"),
    V(1, "GPU Target Temperature", "gpu_target_temperature", g_threshold, NVML_TEMPERATURE_THRESHOLD_GPS_CURR, " C"),
    V(1, "Memory Current Temp", "memory_temp", g_memory_temperature, 0, " C"),
    V(1, "Memory Max Operating T.Limit Temp", "gpu_temp_max_mem_tlimit_threshold", g_threshold_tlimit,
      NVML_TEMPERATURE_THRESHOLD_MEM_MAX, " C"),
    GS(D_SUPPORTED_GPU_TARGET_TEMP, "Supported GPU Target Temp", "supported_gpu_target_temp"),
    V(1, "GPU Target Temp Min", "gpu_target_temp_min", g_threshold, NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN, " C"),
    V(1, "GPU Target Temp Max", "gpu_target_temp_max", g_threshold, NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX, " C"),
    GS(D_POWER, "GPU Power Readings", "gpu_power_readings"),
    VF(1, Q_XML, "Power State", "power_state", g_pstate, 0, NULL),
    V(1, "Average Power Draw", "average_power_draw", g_power_field, NVML_FI_DEV_POWER_AVERAGE, " W"),
    V(1, "Instantaneous Power Draw", "instant_power_draw", g_power_field, NVML_FI_DEV_POWER_INSTANT, " W"),
    V(1, "Current Power Limit", "current_power_limit", g_power_limit, LIMIT_ENFORCED, " W"),
    V(1, "Requested Power Limit", "requested_power_limit", g_power_limit, LIMIT_REQUESTED, " W"),
    V(1, "Default Power Limit", "default_power_limit", g_power_limit, LIMIT_DEFAULT, " W"),
    V(1, "Min Power Limit", "min_power_limit", g_power_limit, LIMIT_MIN, " W"),
    V(1, "Max Power Limit", "max_power_limit", g_power_limit, LIMIT_MAX, " W"),
    GS(D_POWER, "GPU Memory Power Readings ", "gpu_memory_power_readings"), /* 580's trailing space */
    V(1, "Average Power Draw", "average_power_draw", g_na, 0, " W"),
    V(1, "Instantaneous Power Draw", "instant_power_draw", g_na, 0, " W"),
    GS(D_POWER, "Module Power Readings", "module_power_readings"),
    VF(1, Q_XML, "Power State", "power_state", g_pstate, 0, NULL),
    V(1, "Average Power Draw", "average_power_draw", g_module_power, NVML_FI_DEV_POWER_AVERAGE, " W"),
    V(1, "Instantaneous Power Draw", "instant_power_draw", g_module_power, NVML_FI_DEV_POWER_INSTANT, " W"),
    V(1, "Current Power Limit", "current_power_limit", g_module_power, NVML_FI_DEV_POWER_CURRENT_LIMIT, " W"),
    V(1, "Requested Power Limit", "requested_power_limit", g_module_power, NVML_FI_DEV_POWER_REQUESTED_LIMIT,
      " W"),
    V(1, "Default Power Limit", "default_power_limit", g_module_power, NVML_FI_DEV_POWER_DEFAULT_LIMIT, " W"),
    V(1, "Min Power Limit", "min_power_limit", g_module_power, NVML_FI_DEV_POWER_MIN_LIMIT, " W"),
    V(1, "Max Power Limit", "max_power_limit", g_module_power, NVML_FI_DEV_POWER_MAX_LIMIT, " W"),
    VS(D_POWER_SMOOTHING, "Power Smoothing", "power_smoothing", g_na, 0, NULL),
    GS(D_POWER_PROFILES, "Workload Power Profiles", "power_profiles"),
    V(1, "Requested Profiles", "power_profile_requested_profiles", g_na, 0, NULL),
    V(1, "Enforced Profiles", "power_profile_enforced_profiles", g_na, 0, NULL),
    GS(D_CLOCK, "Clocks", "clocks"),
    V(1, "Graphics", "graphics_clock", g_clock, NVML_CLOCK_GRAPHICS, " MHz"),
    V(1, "SM", "sm_clock", g_clock, NVML_CLOCK_SM, " MHz"),
    V(1, "Memory", "mem_clock", g_clock, NVML_CLOCK_MEM, " MHz"),
    V(1, "Video", "video_clock", g_clock, NVML_CLOCK_VIDEO, " MHz"),
    GS(D_CLOCK, "Applications Clocks", "applications_clocks"),
    V(1, "Graphics", "graphics_clock", g_app_clock, NVML_CLOCK_GRAPHICS, " MHz"),
    V(1, "Memory", "mem_clock", g_app_clock, NVML_CLOCK_MEM, " MHz"),
    GS(D_CLOCK, "Default Applications Clocks", "default_applications_clocks"),
    V(1, "Graphics", "graphics_clock", g_app_clock, NVML_CLOCK_GRAPHICS + APP_DEFAULT, " MHz"),
    V(1, "Memory", "mem_clock", g_app_clock, NVML_CLOCK_MEM + APP_DEFAULT, " MHz"),
    GS(D_CLOCK, "Deferred Clocks", "deferred_clocks"),
    V(1, "Memory", "mem_clock", g_na, 0, " MHz"),
    GS(D_CLOCK, "Max Clocks", "max_clocks"),
    V(1, "Graphics", "graphics_clock", g_max_clock, NVML_CLOCK_GRAPHICS, " MHz"),
    V(1, "SM", "sm_clock", g_max_clock, NVML_CLOCK_SM, " MHz"),
    V(1, "Memory", "mem_clock", g_max_clock, NVML_CLOCK_MEM, " MHz"),
    V(1, "Video", "video_clock", g_max_clock, NVML_CLOCK_VIDEO, " MHz"),
    GS(D_CLOCK, "Max Customer Boost Clocks", "max_customer_boost_clocks"),
    V(1, "Graphics", "graphics_clock", g_boost_clock, NVML_CLOCK_GRAPHICS, " MHz"),
    GS(D_CLOCK, "Clock Policy", "clock_policy"),
    V(1, "Auto Boost", "auto_boost", g_auto_boost, 0, NULL),
    V(1, "Auto Boost Default", "auto_boost_default", g_auto_boost, 1, NULL),
    G(0, "Fabric", "fabric"),
    V(1, "State", "state", g_fabric, FABRIC_STATE, NULL),
    V(1, "Status", "status", g_fabric, FABRIC_STATUS, NULL),
    V(1, "CliqueId", "cliqueId", g_fabric, FABRIC_CLIQUE, NULL),
    V(1, "ClusterUUID", "clusterUuid", g_fabric, FABRIC_CLUSTER, NULL),
    G(1, "Health", "health"),
    V(2, "Summary", "summary", g_fabric, FABRIC_SUMMARY, NULL),
    V(2, "Bandwidth", "bandwidth", g_fabric, FABRIC_BANDWIDTH, NULL),
    V(2, "Route Recovery in progress", "route_recovery_in_progress", g_fabric, FABRIC_ROUTE_RECOVERY, NULL),
    V(2, "Route Unhealthy", "route_unhealthy", g_fabric, FABRIC_ROUTE_UNHEALTHY, NULL),
    V(2, "Access Timeout Recovery", "access_timeout_recovery", g_fabric, FABRIC_ACCESS_TIMEOUT, NULL),
    V(2, "Incorrect Configuration", "incorrect_configuration", g_fabric, FABRIC_INCORRECT_CONFIG, NULL),
    SP(D_SUPPORTED_CLOCKS, 0, "Supported Clocks", "supported_clocks", SP_SUPPORTED_CLOCKS),
    SP(D_PIDS, 0, "Processes", "processes", SP_PROCESSES),
    SP(D_ACCOUNTING, Q_XML, NULL, "accounted_processes", SP_ACCOUNTED),
    G(0, "Capabilities", "capabilities"),
    V(1, "EGM", "egm", g_capabilities, 0, NULL),
};

/* one MIG device, under MIG Devices / MIG Device (depth 0 = the device's own lines) */
static const struct qnode mig_nodes[] = {
    VF(0, Q_MIG_INDEX, "Index", "index", NULL, 0, NULL),
    V(0, "GPU Instance ID", "gpu_instance_id", g_mig_id, 0, NULL),
    V(0, "Compute Instance ID", "compute_instance_id", g_mig_id, 1, NULL),
    G(0, "Device Attributes", "device_attributes"),
    G(1, "Shared", "shared"),
    V(2, "Multiprocessor count", "multiprocessor_count", g_mig_attr, ATTR_SM, NULL),
    V(2, "Copy Engine count", "copy_engine_count", g_mig_attr, ATTR_CE, NULL),
    V(2, "Encoder count", "encoder_count", g_mig_attr, ATTR_ENC, NULL),
    V(2, "Decoder count", "decoder_count", g_mig_attr, ATTR_DEC, NULL),
    V(2, "OFA count", "ofa_count", g_mig_attr, ATTR_OFA, NULL),
    V(2, "JPG count", "jpg_count", g_mig_attr, ATTR_JPG, NULL),
    G(0, "ECC Errors", "ecc_error_count"),
    G(1, "Volatile", "volatile_count"),
    ECCE(2, "SRAM Uncorrectable", "sram_uncorrectable", UNC, VOL, SRAM),
    G(0, "FB Memory Usage", "fb_memory_usage"),
    V(1, "Total", "total", g_memory, MEM_TOTAL, " MiB"),
    V(1, "Reserved", "reserved", g_memory, MEM_RESERVED, " MiB"),
    V(1, "Used", "used", g_memory, MEM_USED, " MiB"),
    V(1, "Free", "free", g_memory, MEM_FREE, " MiB"),
    G(0, "BAR1 Memory Usage", "bar1_memory_usage"),
    V(1, "Total", "total", g_bar1, MEM_TOTAL, " MiB"),
    V(1, "Used", "used", g_bar1, MEM_USED, " MiB"),
    V(1, "Free", "free", g_bar1, MEM_FREE, " MiB"),
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define COLUMN 55          /* where 580's -q puts the ':' */
#define PROCESS_COLUMN 42  /* ... but in its process entries, as before 580 */

static int xml_mode;

static void xml_text(const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '&': emit("&amp;"); break;
        case '<': emit("&lt;"); break;
        case '>': emit("&gt;"); break;
        default: emit("%c", *s);
        }
    }
}

static void tabs(int n)
{
    for (int i = 0; i < n; i++)
        emit("\t");
}

/* A line of -q text ("label : value", the ':' in `column`), indented `level` steps of four. */
static void text_at(int column, int level, const char *label, const char *value)
{
    int indent = 4 * level;
    int width = column - indent;
    if ((int)strlen(label) >= width)
        width = (int)strlen(label) + 1;
    emit("%*s%-*s: %s\n", indent, "", width, label, value);
}

static void text_line(int level, const char *label, const char *value)
{
    text_at(COLUMN, level, label, value);
}

static void xml_leaf(int level, const char *tag, const char *value)
{
    tabs(level);
    emit("<%s>", tag);
    xml_text(value);
    emit("</%s>\n", tag);
}

/* the value as -q shows it: value and unit, or N/A / NVML's error text */
static const char *shown(struct val *v, const struct qnode *n)
{
    if (v->rc != NVML_SUCCESS)
        return err_text(v->rc);
    if (xml_mode && (n->flags & Q_HEX) && strncmp(v->s, "0x", 2) == 0)
        memmove(v->s, v->s + 2, strlen(v->s) - 1);
    if (n->suffix != NULL) {
        size_t len = strlen(v->s);
        snprintf(v->s + len, sizeof v->s - len, "%s", n->suffix);
    }
    return v->s;
}

static void special(const struct qnode *n, nvmlDevice_t dev, int level);

static void close_group(const struct qnode *n, int level)
{
    if (xml_mode) {
        tabs(level + n->depth);
        emit("</%s>\n", n->tag);
    }
}

/*
 * Print nodes[0..count) for `dev`; `level` is the nesting of depth-0 nodes (text: indent steps;
 * XML: tabs). `sections`: -d bits, 0 for everything. `index`: for Q_MIG_INDEX.
 */
static void render(const struct qnode *nodes, unsigned count, nvmlDevice_t dev, int level, unsigned sections,
                   unsigned index)
{
    unsigned open[8]; /* the groups open now (XML closes them) */
    int opened = 0;
    for (unsigned i = 0; i < count; i++) {
        const struct qnode *n = &nodes[i];
        int skip = 0;
        struct val v;
        while (opened > 0 && nodes[open[opened - 1]].depth >= n->depth)
            close_group(&nodes[open[--opened]], level);
        if ((xml_mode && (n->flags & Q_TEXT)) || (!xml_mode && (n->flags & Q_XML)))
            skip = 1;
        if (n->depth == 0 && sections != 0 && !(n->section & sections))
            skip = 1;
        if (!skip && (n->flags & Q_PROBE)) {
            n->get(dev, n->arg, &v);
            if (v.rc != NVML_SUCCESS) {
                if (xml_mode)
                    xml_leaf(level + n->depth, n->tag, err_text(v.rc));
                else
                    text_line(level + n->depth, n->label, err_text(v.rc));
                skip = 1;
            }
        }
        if (skip) {
            while (i + 1 < count && nodes[i + 1].depth > n->depth)
                i++;
            continue;
        }
        int lvl = level + n->depth + (!xml_mode && (n->flags & Q_DEEPER) ? 1 : 0);
        if (n->special != SP_NONE) {
            special(n, dev, level);
        } else if (n->flags & Q_MIG_INDEX) {
            char buf[16];
            snprintf(buf, sizeof buf, "%u", index);
            if (xml_mode)
                xml_leaf(lvl, n->tag, buf);
            else
                text_line(lvl, n->label, buf);
        } else if (n->get != NULL && !(n->flags & Q_PROBE)) {
            n->get(dev, n->arg, &v);
            if (xml_mode)
                xml_leaf(lvl, n->tag, shown(&v, n));
            else
                text_line(lvl, n->label, shown(&v, n));
        } else {
            if (xml_mode) {
                tabs(lvl);
                emit("<%s>\n", n->tag);
            } else {
                emit("%*s%s\n", 4 * lvl, "", n->label);
            }
            open[opened++] = i;
        }
    }
    while (opened > 0)
        close_group(&nodes[open[--opened]], level);
}

static void mig_devices_node(const struct qnode *n, nvmlDevice_t gpu, int level)
{
    nvmlDevice_t migs[MAX_MIGS];
    unsigned count = mig_devices(gpu, migs, MAX_MIGS);
    if (!xml_mode) {
        if (count == 0)
            return; /* -q shows MIG devices only in MIG mode */
        emit("%*s%s\n", 4 * level, "", n->label);
        for (unsigned m = 0; m < count; m++) {
            emit("%*sMIG Device\n", 4 * (level + 1), "");
            render(mig_nodes, COUNT(mig_nodes), migs[m], level + 2, 0, m);
        }
        return;
    }
    tabs(level);
    emit("<%s>\n", n->tag);
    if (count == 0) {
        tabs(level + 1);
        emit("None\n");
    }
    for (unsigned m = 0; m < count; m++) {
        tabs(level + 1);
        emit("<mig_device>\n");
        render(mig_nodes, COUNT(mig_nodes), migs[m], level + 2, 0, m);
        tabs(level + 1);
        emit("</mig_device>\n");
    }
    tabs(level);
    emit("</%s>\n", n->tag);
}

static void supported_clocks_node(const struct qnode *n, nvmlDevice_t gpu, int level, unsigned sections)
{
    unsigned mem[32], gr[512];
    unsigned nmem = COUNT(mem);
    nvmlReturn_t rc;
    if (!xml_mode && !(sections & D_SUPPORTED_CLOCKS))
        return; /* -q text lists them only when asked for */
    rc = nvmlDeviceGetSupportedMemoryClocks(gpu, &nmem, mem);
    if (rc != NVML_SUCCESS) {
        if (xml_mode)
            xml_leaf(level, n->tag, err_text(rc));
        else
            text_line(level, n->label, err_text(rc));
        return;
    }
    if (xml_mode) {
        tabs(level);
        emit("<%s>\n", n->tag);
    } else {
        emit("%*s%s\n", 4 * level, "", n->label);
    }
    for (unsigned m = 0; m < nmem && m < COUNT(mem); m++) {
        unsigned ngr = COUNT(gr);
        char buf[32];
        snprintf(buf, sizeof buf, "%u MHz", mem[m]);
        if (xml_mode) {
            tabs(level + 1);
            emit("<supported_mem_clock>\n");
            xml_leaf(level + 2, "value", buf);
        } else {
            text_line(level + 1, "Memory", buf);
        }
        if (nvmlDeviceGetSupportedGraphicsClocks(gpu, mem[m], &ngr, gr) == NVML_SUCCESS) {
            for (unsigned g = 0; g < ngr && g < COUNT(gr); g++) {
                snprintf(buf, sizeof buf, "%u MHz", gr[g]);
                if (xml_mode)
                    xml_leaf(level + 2, "supported_graphics_clock", buf);
                else
                    text_line(level + 2, "Graphics", buf);
            }
        }
        if (xml_mode) {
            tabs(level + 1);
            emit("</supported_mem_clock>\n");
        }
    }
    if (xml_mode) {
        tabs(level);
        emit("</%s>\n", n->tag);
    }
}

static void processes_node(const struct qnode *n, nvmlDevice_t gpu, int level)
{
    nvmlDevice_t devs[MAX_MIGS + 1];
    unsigned ndev = mig_devices(gpu, devs, MAX_MIGS);
    int any = 0;
    if (ndev == 0)
        devs[ndev++] = gpu;
    if (xml_mode) {
        tabs(level);
        emit("<%s>\n", n->tag);
    }
    for (unsigned k = 0; k < ndev; k++) {
        nvmlProcessInfo_t procs[64];
        unsigned count = COUNT(procs);
        if (nvmlDeviceGetComputeRunningProcesses_v3(devs[k], &count, procs) != NVML_SUCCESS)
            continue;
        for (unsigned p = 0; p < count && p < COUNT(procs); p++) {
            char gi[16] = "N/A", ci[16] = "N/A", pid[16], name[64] = "N/A", mem[32];
            if (devs[k] != gpu) {
                snprintf(gi, sizeof gi, "%u", procs[p].gpuInstanceId);
                snprintf(ci, sizeof ci, "%u", procs[p].computeInstanceId);
            }
            snprintf(pid, sizeof pid, "%u", procs[p].pid);
            nvmlSystemGetProcessName(procs[p].pid, name, sizeof name);
            snprintf(mem, sizeof mem, "%llu MiB", procs[p].usedGpuMemory / (1024ULL * 1024ULL));
            if (xml_mode) {
                tabs(level + 1);
                emit("<process_info>\n");
                xml_leaf(level + 2, "gpu_instance_id", gi);
                xml_leaf(level + 2, "compute_instance_id", ci);
                xml_leaf(level + 2, "pid", pid);
                xml_leaf(level + 2, "type", "C");
                xml_leaf(level + 2, "process_name", name);
                xml_leaf(level + 2, "used_memory", mem);
                tabs(level + 1);
                emit("</process_info>\n");
            } else {
                if (!any)
                    emit("%*s%s\n", 4 * level, "", n->label);
                text_at(PROCESS_COLUMN, level + 1, "GPU instance ID", gi);
                text_at(PROCESS_COLUMN, level + 1, "Compute instance ID", ci);
                text_at(PROCESS_COLUMN, level + 1, "Process ID", pid);
                text_at(PROCESS_COLUMN, level + 2, "Type", "C");
                text_at(PROCESS_COLUMN, level + 2, "Name", name);
                text_at(PROCESS_COLUMN, level + 2, "Used GPU Memory", mem);
            }
            any = 1;
        }
    }
    if (xml_mode) {
        tabs(level);
        emit("</%s>\n", n->tag);
    } else if (!any) {
        text_at(PROCESS_COLUMN, level, n->label, "None");
    }
}

static unsigned g_sections; /* -d, for the special nodes */

static void special(const struct qnode *n, nvmlDevice_t dev, int level)
{
    switch (n->special) {
    case SP_MIG_DEVICES: mig_devices_node(n, dev, level); break;
    case SP_SUPPORTED_CLOCKS: supported_clocks_node(n, dev, level, g_sections); break;
    case SP_PROCESSES: processes_node(n, dev, level); break;
    default: /* accounting keeps no processes in a container */
        tabs(level);
        emit("<%s>\n", n->tag);
        tabs(level);
        emit("</%s>\n", n->tag);
        break;
    }
}

static unsigned parse_sections(const char *display)
{
    char buf[512];
    unsigned bits = 0;
    if (display == NULL)
        return 0;
    snprintf(buf, sizeof buf, "%s", display);
    for (char *save = NULL, *s = strtok_r(buf, ",", &save); s != NULL; s = strtok_r(NULL, ",", &save)) {
        unsigned k;
        for (k = 0; k < COUNT(section_names); k++)
            if (strcmp(section_names[k].name, s) == 0)
                break;
        if (k == COUNT(section_names))
            fail(RC_INVALID_ARG, "ERROR: Invalid value %s for option -d. Please run 'nvidia-smi -h' for help.\n\n", s);
        bits |= section_names[k].bit;
    }
    return bits;
}

static struct targets q_targets;

static int query_once(const struct opts *o, int first)
{
    struct val driver, cuda;
    char date[64];
    unsigned count = 0;
    (void)first;
    (void)o;
    now_text(date, sizeof date, 0);
    g_driver_version(NULL, 0, &driver);
    g_cuda_version(NULL, 0, &cuda);
    nvmlDeviceGetCount_v2(&count);
    if (xml_mode) {
        emit("<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v13.dtd\">\n<nvidia_smi_log>\n");
        xml_leaf(1, "timestamp", date);
        xml_leaf(1, "driver_version", driver.rc ? err_text(driver.rc) : driver.s);
        xml_leaf(1, "cuda_version", cuda.rc ? err_text(cuda.rc) : cuda.s);
        emit("\t<attached_gpus>%u</attached_gpus>\n", count);
    } else {
        emit("\n==============NVSMI LOG==============\n\n");
        text_line(0, "Timestamp", date);
        text_line(0, "Driver Version", driver.rc ? err_text(driver.rc) : driver.s);
        text_line(0, "CUDA Version", cuda.rc ? err_text(cuda.rc) : cuda.s);
        emit("\n");
        char n[16];
        snprintf(n, sizeof n, "%u", count);
        text_line(0, "Attached GPUs", n);
    }
    for (unsigned g = 0; g < q_targets.n; g++) {
        char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
        gpu_bus_id(q_targets.gpu[g].h, bus, sizeof bus);
        if (xml_mode) {
            emit("\t<gpu id=\"%s\">\n", bus);
            render(gpu_nodes, COUNT(gpu_nodes), q_targets.gpu[g].h, 2, 0, 0);
            emit("\t</gpu>\n\n");
        } else {
            emit("GPU %s\n", bus);
            render(gpu_nodes, COUNT(gpu_nodes), q_targets.gpu[g].h, 1, g_sections, 0);
            emit("\n");
        }
    }
    if (xml_mode)
        emit("</nvidia_smi_log>\n");
    return RC_OK;
}

int cmd_query(const struct opts *o)
{
    xml_mode = o->xml;
    g_sections = xml_mode ? 0 : parse_sections(o->display); /* -d does not apply to -x */
    if (select_gpus(o->ids, &q_targets) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    return run_loop(o, query_once);
}
