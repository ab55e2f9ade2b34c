/*
 * The --query-gpu fields in the real tool's order (nvidia-smi 580 --help-query-gpu: every name and
 * alias; tests/data/nvidia-smi/h200-580/query-every-field.txt queries each on a real H200). The
 * help texts are dra-fake's own short descriptions.
 */
#include <string.h>

#include "fields.h"
#include "values.h"

#define F(name, aliases, unit, get, arg, help) {name, aliases, unit, get, arg, help}
#define S(title, help) {NULL, title, NULL, NULL, 0, help}
#define ECC_SET(kind, type, counter)                                                                          \
    F("ecc.errors." kind ".device_memory", NULL, NULL, g_ecc_counter,                                         \
      ECC_ARG(type, counter, NVML_MEMORY_LOCATION_DEVICE_MEMORY), "Errors in the device memory."),            \
    F("ecc.errors." kind ".dram", NULL, NULL, g_ecc_counter, ECC_ARG(type, counter, NVML_MEMORY_LOCATION_DRAM), \
      "Errors in the device memory (DRAM)."),                                                                 \
    F("ecc.errors." kind ".register_file", NULL, NULL, g_ecc_counter,                                         \
      ECC_ARG(type, counter, NVML_MEMORY_LOCATION_REGISTER_FILE), "Errors in the register file."),            \
    F("ecc.errors." kind ".l1_cache", NULL, NULL, g_ecc_counter,                                              \
      ECC_ARG(type, counter, NVML_MEMORY_LOCATION_L1_CACHE), "Errors in the L1 cache."),                      \
    F("ecc.errors." kind ".l2_cache", NULL, NULL, g_ecc_counter,                                              \
      ECC_ARG(type, counter, NVML_MEMORY_LOCATION_L2_CACHE), "Errors in the L2 cache."),                      \
    F("ecc.errors." kind ".texture_memory", NULL, NULL, g_ecc_counter,                                        \
      ECC_ARG(type, counter, NVML_MEMORY_LOCATION_TEXTURE_MEMORY), "Parity errors in the texture memory."),   \
    F("ecc.errors." kind ".cbu", NULL, NULL, g_ecc_counter, ECC_ARG(type, counter, NVML_MEMORY_LOCATION_CBU), \
      "Parity errors in the CBU."),                                                                           \
    F("ecc.errors." kind ".sram", NULL, NULL, g_ecc_counter, ECC_ARG(type, counter, NVML_MEMORY_LOCATION_SRAM), \
      "Errors in the on-chip SRAMs."),                                                                        \
    F("ecc.errors." kind ".total", NULL, NULL, g_ecc_total, (type) * 10 + (counter), "All errors of the chip.")

#define REASON(name, bit, help)                                                                               \
    F("clocks_event_reasons." name, "clocks_throttle_reasons." name, NULL, g_event_reason, bit, help)

const struct field query_fields[] = {
    F("timestamp", NULL, NULL, g_timestamp, 0, "When the query ran, as \"YYYY/MM/DD HH:MM:SS.msec\"."),
    F("driver_version", NULL, NULL, g_driver_version, 0, "The version of the NVIDIA driver."),
    S("vgpu_driver_capability", "What the driver supports for virtual GPUs."),
    F("vgpu_driver_capability.heterogenous_multivGPU", NULL, NULL, g_na, 0,
      "Whether virtual GPUs of different types can share a VM."),
    F("count", NULL, NULL, g_count, 0, "How many NVIDIA GPUs the system has."),
    F("name", "gpu_name", NULL, g_name, 0, "The product name of the GPU."),
    F("serial", "gpu_serial", NULL, g_serial, 0, "The serial number printed on the board."),
    F("uuid", "gpu_uuid", NULL, g_uuid, 0, "The GPU's globally unique identifier."),
    F("pci.bus_id", "gpu_bus_id", NULL, g_bus_id, 0, "The PCI bus ID, domain:bus:device.function in hex."),
    F("pci.domain", NULL, NULL, g_pci, PCI_DOMAIN, "The PCI domain, in hex."),
    F("pci.bus", NULL, NULL, g_pci, PCI_BUS, "The PCI bus, in hex."),
    F("pci.device", NULL, NULL, g_pci, PCI_DEVICE, "The PCI device, in hex."),
    F("pci.baseClass", NULL, NULL, g_pci_ext, 0, "The PCI base class code, in hex."),
    F("pci.subClass", NULL, NULL, g_pci_ext, 1, "The PCI sub class code, in hex."),
    F("pci.device_id", NULL, NULL, g_pci, PCI_DEVICE_ID, "The PCI device and vendor ID, in hex."),
    F("pci.sub_device_id", NULL, NULL, g_pci, PCI_SUBSYSTEM_ID, "The PCI subsystem ID, in hex."),
    S("vgpu_device_capability", "What the GPU supports for virtual GPUs."),
    F("vgpu_device_capability.fractional_multiVgpu", NULL, NULL, g_na, 0,
      "Whether fractional vGPU profiles work in multi-vGPU setups."),
    F("vgpu_device_capability.heterogeneous_timeSlice_profile", NULL, NULL, g_na, 0,
      "Whether time-sliced vGPUs of different types can run together."),
    F("vgpu_device_capability.heterogeneous_timeSlice_sizes", NULL, NULL, g_na, 0,
      "Whether time-sliced vGPUs of different memory sizes can run together."),
    F("vgpu_device_capability.homogeneous_placements", NULL, NULL, g_na, 0,
      "Whether placements of time-sliced vGPUs of one size are reported."),
    F("vgpu_device_capability.mig_timeSlicing", NULL, NULL, g_na, 0, "Whether time-sliced vGPUs run on MIG."),
    F("vgpu_device_capability.mig_timeSlicing_mode", NULL, NULL, g_na, 0,
      "Whether MIG time-slicing is switched on."),
    F("pcie.link.gen.current", NULL, NULL, g_pcie_gen, GEN_CURRENT,
      "The PCIe generation of the link now (lower when idle). Deprecated: pcie.link.gen.gpucurrent."),
    F("pcie.link.gen.gpucurrent", NULL, NULL, g_pcie_gen, GEN_GPU_CURRENT,
      "The PCIe generation of the link now (lower when idle)."),
    F("pcie.link.gen.max", NULL, NULL, g_pcie_gen, GEN_MAX,
      "The highest PCIe generation this GPU and system can use together."),
    F("pcie.link.gen.gpumax", NULL, NULL, g_pcie_gen, GEN_GPU_MAX, "The highest PCIe generation of the GPU."),
    F("pcie.link.gen.hostmax", NULL, NULL, g_pcie_gen, GEN_HOST_MAX,
      "The highest PCIe generation of the root port the GPU hangs off."),
    F("pcie.link.width.current", NULL, NULL, g_pcie_width, 0, "The PCIe link width now (lower when idle)."),
    F("pcie.link.width.max", NULL, NULL, g_pcie_width, 1,
      "The widest PCIe link this GPU and system can use together."),
    F("index", NULL, NULL, g_index, 0, "The GPU's zero-based index (may change at boot)."),
    F("display_mode", NULL, NULL, g_deprecated, 0, "Deprecated."),
    F("display_attached", NULL, NULL, g_enable, EN_DISPLAY_ATTACHED,
      "Whether a display is connected to the GPU: \"Yes\" or \"No\"."),
    F("display_active", NULL, NULL, g_enable, EN_DISPLAY_ACTIVE,
      "Whether a display is initialized on the GPU: \"Enabled\" or \"Disabled\"."),
    F("persistence_mode", NULL, NULL, g_enable, EN_PERSISTENCE,
      "Whether the driver stays loaded without clients: \"Enabled\" or \"Disabled\". Linux only."),
    F("addressing_mode", NULL, NULL, g_addressing_mode, 0,
      "How the GPU reaches system memory: \"HMM\", \"ATS\" or \"None\". Linux only."),
    F("accounting.mode", NULL, NULL, g_enable, EN_ACCOUNTING,
      "Whether per-process accounting is on: \"Enabled\" or \"Disabled\" (see --help-query-accounted-apps)."),
    F("accounting.buffer_size", NULL, NULL, g_accounting_buffer, 0,
      "How many processes the accounting buffer keeps before the oldest are overwritten."),
    S("driver_model", "The Windows driver model (TCC, WDDM, MCDM); always N/A on Linux."),
    F("driver_model.current", NULL, NULL, g_driver_model, 0, "The driver model in use. N/A on Linux."),
    F("driver_model.pending", NULL, NULL, g_driver_model, 1, "The driver model after a reboot. N/A on Linux."),
    F("vbios_version", NULL, NULL, g_vbios, 0, "The version of the board's BIOS."),
    S("inforom", "Versions of the objects in the board's inforom, a small persistent store of configuration "
                 "and state."),
    F("inforom.img", "inforom.image", NULL, g_inforom, -1, "The version of the whole inforom image."),
    F("inforom.oem", NULL, NULL, g_inforom, NVML_INFOROM_OEM, "The version of the OEM configuration object."),
    F("inforom.ecc", NULL, NULL, g_inforom, NVML_INFOROM_ECC, "The version of the ECC record object."),
    F("inforom.pwr", "inforom.power", NULL, g_inforom, NVML_INFOROM_POWER,
      "The version of the power management object."),
    F("inforom.checksum_validation", NULL, NULL, g_inforom_checksum, 0, "Whether the inforom checksum is valid."),
    F("gpu_recovery_action", NULL, NULL, g_recovery_action, 0,
      "What the driver recommends to bring the GPU back to a good state; N/A where not supported."),
    S("gom", "The GPU Operation Mode: \"All On\", \"Compute\" or \"Low Double Precision\" (set with --gom)."),
    F("gom.current", "gpu_operation_mode.current", NULL, g_gom, 0, "The operation mode in use."),
    F("gom.pending", "gpu_operation_mode.pending", NULL, g_gom, 1, "The operation mode after a reboot."),
    F("fan.speed", NULL, "%", g_fan, 0, "The intended fan speed, in percent of its maximum. N/A for boards "
                                        "cooled by the chassis."),
    F("pstate", NULL, NULL, g_pstate, 0, "The performance state, P0 (fastest) to P12 (slowest)."),
    S("clocks_event_reasons", "Why the clocks are below their maximum right now; all \"Not Active\" means they "
                              "are not held back."),
    F("clocks_event_reasons.supported", "clocks_throttle_reasons.supported", NULL, g_event_mask, 0,
      "Bit mask of the reasons the GPU reports (nvmlClocksEventReason*)."),
    F("clocks_event_reasons.active", "clocks_throttle_reasons.active", NULL, g_event_mask, 1,
      "Bit mask of the reasons active now."),
    REASON("gpu_idle", 0, "Nothing runs on the GPU: the clocks idle."),
    REASON("applications_clocks_setting", 1, "The applications clocks setting holds the clocks down."),
    REASON("sw_power_cap", 2, "The power limit holds the clocks down."),
    REASON("hw_slowdown", 3, "A hardware slowdown (thermal or power brake) halves the clocks or more."),
    REASON("hw_thermal_slowdown", 6, "A hardware slowdown for heat."),
    REASON("hw_power_brake_slowdown", 7, "A hardware slowdown asserted by the power supply."),
    REASON("sw_thermal_slowdown", 5, "The driver holds the clocks down for heat."),
    REASON("sync_boost", 4, "The GPU's sync boost group holds the clocks down."),
    S("clocks_event_reasons_counters", "How long each reason has held the clocks down, in microseconds."),
    F("clocks_event_reasons_counters.sw_power_cap", NULL, "us", g_event_counter, NVML_FI_DEV_PERF_POLICY_POWER,
      "Time held down by the power limit."),
    F("clocks_event_reasons_counters.sync_boost", NULL, "us", g_event_counter, NVML_FI_DEV_PERF_POLICY_SYNC_BOOST,
      "Time held down by the sync boost group."),
    F("clocks_event_reasons_counters.sw_thermal_slowdown", NULL, "us", g_event_counter,
      NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, "Time held down by the driver for heat."),
    F("clocks_event_reasons_counters.hw_thermal_slowdown", NULL, "us", g_event_counter,
      NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, "Time in hardware slowdown for heat."),
    F("clocks_event_reasons_counters.hw_power_brake_slowdown", NULL, "us", g_event_counter,
      NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, "Time in hardware slowdown by the power brake."),
    S("memory", "The GPU's own memory. ECC takes a part of it; the driver reserves some."),
    F("memory.total", NULL, "MiB", g_memory, MEM_TOTAL, "All memory of the GPU."),
    F("memory.reserved", NULL, "MiB", g_memory, MEM_RESERVED, "Memory the driver and firmware keep."),
    F("memory.used", NULL, "MiB", g_memory, MEM_USED, "Memory allocated by running contexts."),
    F("memory.free", NULL, "MiB", g_memory, MEM_FREE, "Memory not in use."),
    F("compute_mode", NULL, NULL, g_compute_mode, 0,
      "Which compute contexts may run on the GPU:\n"
      "\"0: Default\" any number of contexts.\n"
      "\"1: Exclusive_Thread\" deprecated; see Exclusive_Process.\n"
      "\"2: Prohibited\" none.\n"
      "\"3: Exclusive_Process\" one context, usable from many threads."),
    F("compute_cap", NULL, NULL, g_compute_cap, 0, "The CUDA compute capability, major.minor."),
    S("utilization", "How busy the GPU's engines were over the last sample period (1/6 s to 1 s). Not "
                     "reported for a GPU in MIG mode."),
    F("utilization.gpu", NULL, "%", g_util, 0, "Share of time a kernel ran on the GPU."),
    F("utilization.memory", NULL, "%", g_util, 1, "Share of time the device memory was read or written."),
    F("utilization.encoder", NULL, "%", g_engine_util, 0, "Share of time the video encoder worked."),
    F("utilization.decoder", NULL, "%", g_engine_util, 1, "Share of time the video decoder worked."),
    F("utilization.jpeg", NULL, "%", g_engine_util, 2, "Share of time the JPEG engine worked."),
    F("utilization.ofa", NULL, "%", g_engine_util, 3, "Share of time the optical flow engine worked."),
    S("encoder.stats", "The GPU's video encoder sessions."),
    F("encoder.stats.sessionCount", NULL, NULL, g_encoder_stats, 0, "Encoder sessions running."),
    F("encoder.stats.averageFps", NULL, NULL, g_encoder_stats, 1, "Their average frames per second."),
    F("encoder.stats.averageLatency", NULL, NULL, g_encoder_stats, 2, "Their average latency, in microseconds."),
    S("dramEncryption.mode", "Whether DRAM encryption is on: \"Enabled\" or \"Disabled\"; a change needs a "
                             "reboot."),
    F("dramEncryption.mode.current", NULL, NULL, g_dram_encryption, 0, "The mode in use."),
    F("dramEncryption.mode.pending", NULL, NULL, g_dram_encryption, 1, "The mode after a reboot."),
    S("ecc.mode", "Whether ECC is on: \"Enabled\" or \"Disabled\"; a change needs a reboot."),
    F("ecc.mode.current", NULL, NULL, g_enable, EN_ECC, "The mode in use."),
    F("ecc.mode.pending", NULL, NULL, g_enable, EN_ECC_PENDING, "The mode after a reboot."),
    S("ecc.errors", "ECC error counts: corrected (single bit) and uncorrected (double bit), since the driver "
                    "loaded (volatile) and over the board's life (aggregate)."),
    ECC_SET("corrected.volatile", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC),
    ECC_SET("corrected.aggregate", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC),
    ECC_SET("uncorrected.volatile", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC),
    ECC_SET("uncorrected.aggregate", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC),
    F("ecc.errors.uncorrected.volatile.sram.parity", NULL, NULL, g_sram, SRAM_VOL_PARITY,
      "Distinct parity errors in SRAM since the driver loaded."),
    F("ecc.errors.uncorrected.volatile.sram.secded", NULL, NULL, g_sram, SRAM_VOL_SECDED,
      "Distinct SEC-DED errors in SRAM since the driver loaded."),
    F("ecc.errors.uncorrected.aggregate.sram.parity", NULL, NULL, g_sram, SRAM_AGG_PARITY,
      "Distinct parity errors in SRAM over the board's life."),
    F("ecc.errors.uncorrected.aggregate.sram.secded", NULL, NULL, g_sram, SRAM_AGG_SECDED,
      "Distinct SEC-DED errors in SRAM over the board's life."),
    F("ecc.errors.uncorrected.aggregate.sram.thresholdExceeded", NULL, NULL, g_sram, SRAM_THRESHOLD,
      "Whether the SRAM error threshold was crossed."),
    F("ecc.errors.uncorrected.aggregate.sram.l2", NULL, NULL, g_sram, SRAM_L2, "Distinct errors in the L2 cache."),
    F("ecc.errors.uncorrected.aggregate.sram.sm", NULL, NULL, g_sram, SRAM_SM, "Distinct errors in the SMs."),
    F("ecc.errors.uncorrected.aggregate.sram.mcu", NULL, NULL, g_sram, SRAM_MCU,
      "Distinct errors in the microcontrollers."),
    F("ecc.errors.uncorrected.aggregate.sram.pcie", NULL, NULL, g_sram, SRAM_PCIE, "Errors in the PCIe logic."),
    F("ecc.errors.uncorrected.aggregate.sram.other", NULL, NULL, g_sram, SRAM_OTHER,
      "Distinct SRAM errors elsewhere."),
    S("retired_pages", "Device memory pages the driver retired after ECC errors (boards before row remapping)."),
    F("retired_pages.single_bit_ecc.count", "retired_pages.sbe", NULL, g_retired, 0,
      "Pages retired after repeated single bit errors."),
    F("retired_pages.double_bit.count", "retired_pages.dbe", NULL, g_retired, 1,
      "Pages retired after a double bit error."),
    F("retired_pages.pending", NULL, NULL, g_retired_pending, 0, "Whether pages wait to be retired at reboot."),
    S("remapped_rows", "Memory rows the GPU remapped after ECC errors; a pending remap needs a GPU reset."),
    F("remapped_rows.correctable", "remapped_rows.sbe", NULL, g_remapped, ROWS_CORR,
      "Rows remapped after correctable errors."),
    F("remapped_rows.correctable_inactive", NULL, NULL, g_remapped, ROWS_CORR_INACTIVE,
      "Rows remapped after correctable errors, not active."),
    F("remapped_rows.uncorrectable", "remapped_rows.dbe", NULL, g_remapped, ROWS_UNC,
      "Rows remapped after uncorrectable errors."),
    F("remapped_rows.uncorrectable_inactive", NULL, NULL, g_remapped, ROWS_UNC_INACTIVE,
      "Rows remapped after uncorrectable errors, not active."),
    F("remapped_rows.pending", NULL, NULL, g_remapped, ROWS_PENDING, "Whether a remap waits for a reset."),
    F("remapped_rows.failure", NULL, NULL, g_remapped, ROWS_FAILURE, "Whether a remap ever failed."),
    S("remapped_rows.histogram", "Memory banks by how many spare rows they have left."),
    F("remapped_rows.histogram.max", NULL, NULL, g_histogram, 0, "Banks with all spare rows left."),
    F("remapped_rows.histogram.high", NULL, NULL, g_histogram, 1, "Banks with many spare rows left."),
    F("remapped_rows.histogram.partial", NULL, NULL, g_histogram, 2, "Banks with some spare rows left."),
    F("remapped_rows.histogram.low", NULL, NULL, g_histogram, 3, "Banks with few spare rows left."),
    F("remapped_rows.histogram.none", NULL, NULL, g_histogram, 4, "Banks without spare rows."),
    F("temperature.gpu", NULL, NULL, g_temperature, 0, "The GPU core temperature, in degrees C."),
    F("temperature.gpu.tlimit", NULL, NULL, g_temperature_margin, 0,
      "How far the GPU is below its maximum operating temperature, in degrees C."),
    F("temperature.memory", NULL, NULL, g_memory_temperature, 0, "The HBM temperature, in degrees C."),
    F("power.management", NULL, NULL, g_enable, EN_POWER, "Whether power management is on."),
    F("power.draw", NULL, "W", g_power_draw, 0, "The board's power draw, in watts (a one second average on "
                                                "Ampere and newer)."),
    F("power.draw.average", "gpu.power.draw.average", "W", g_power_field, NVML_FI_DEV_POWER_AVERAGE,
      "The board's average power draw, in watts."),
    F("power.draw.instant", "gpu.power.draw.instant", "W", g_power_field, NVML_FI_DEV_POWER_INSTANT,
      "The board's instant power draw, in watts."),
    F("power.limit", "gpu.power.requested_limit", "W", g_power_limit, LIMIT_REQUESTED,
      "The power limit set by software (-pl), in watts."),
    F("enforced.power.limit", "gpu.power.current_limit", "W", g_power_limit, LIMIT_ENFORCED,
      "The power limit in force (the lowest of all limiters), in watts."),
    F("power.default_limit", "gpu.power.default_limit", "W", g_power_limit, LIMIT_DEFAULT,
      "The power limit after the driver loads, in watts."),
    F("power.min_limit", "gpu.power.min_limit", "W", g_power_limit, LIMIT_MIN,
      "The lowest power limit one can set, in watts."),
    F("power.max_limit", "gpu.power.max_limit", "W", g_power_limit, LIMIT_MAX,
      "The highest power limit one can set, in watts."),
    F("module.power.draw.average", NULL, "W", g_module_power, NVML_FI_DEV_POWER_AVERAGE,
      "The module's average power draw, in watts."),
    F("module.power.draw.instant", NULL, "W", g_module_power, NVML_FI_DEV_POWER_INSTANT,
      "The module's instant power draw, in watts."),
    F("module.power.limit", "module.power.requested_limit", "W", g_module_power, NVML_FI_DEV_POWER_REQUESTED_LIMIT,
      "The module's power limit set by software, in watts."),
    F("module.enforced.power.limit", "module.power.current_limit", "W", g_module_power,
      NVML_FI_DEV_POWER_CURRENT_LIMIT, "The module's power limit in force, in watts."),
    F("module.power.default_limit", NULL, "W", g_module_power, NVML_FI_DEV_POWER_DEFAULT_LIMIT,
      "The module's power limit after the driver loads, in watts."),
    F("module.power.min_limit", NULL, "W", g_module_power, NVML_FI_DEV_POWER_MIN_LIMIT,
      "The module's lowest settable power limit, in watts."),
    F("module.power.max_limit", NULL, "W", g_module_power, NVML_FI_DEV_POWER_MAX_LIMIT,
      "The module's highest settable power limit, in watts."),
    F("power_smoothing.delayed_power_smoothing_supported", NULL, NULL, g_na, 0,
      "Whether delayed power smoothing is supported (Yes/No)."),
    F("power_smoothing.primary_power_floor", NULL, NULL, g_na, 0, "The primary power floor, in watts."),
    F("power_smoothing.secondary_power_floor", NULL, NULL, g_na, 0, "The secondary power floor, in watts."),
    F("power_smoothing.min_primary_floor_activation_offset", NULL, NULL, g_na, 0,
      "The smallest primary floor activation offset, in watts."),
    F("power_smoothing.min_primary_floor_activation_point", NULL, NULL, g_na, 0,
      "The smallest primary floor activation point, in watts."),
    F("power_smoothing.window_multiplier", NULL, NULL, g_na, 0, "The window multiplier, in ms."),
    F("power_smoothing.curr_profile.secondary_power_floor", NULL, NULL, g_na, 0,
      "The active profile's secondary power floor, in watts."),
    F("power_smoothing.curr_profile.primary_floor_act_window_multiplier", NULL, NULL, g_na, 0,
      "The active profile's primary floor activation window multiplier."),
    F("power_smoothing.curr_profile.primary_floor_tar_window_multiplier", NULL, NULL, g_na, 0,
      "The active profile's primary floor target window multiplier."),
    F("power_smoothing.curr_profile.primary_floor_act_offset", NULL, NULL, g_na, 0,
      "The active profile's primary floor activation offset, in watts."),
    F("power_smoothing.admin_override.secondary_power_floor", NULL, NULL, g_na, 0,
      "The administrator's secondary power floor, if set, in watts."),
    F("power_smoothing.admin_override.primary_floor_act_window_multiplier", NULL, NULL, g_na, 0,
      "The administrator's primary floor activation window multiplier, if set."),
    F("power_smoothing.admin_override.primary_floor_tar_window_multiplier", NULL, NULL, g_na, 0,
      "The administrator's primary floor target window multiplier, if set."),
    F("power_smoothing.admin_override.primary_floor_act_offset", NULL, NULL, g_na, 0,
      "The administrator's primary floor activation offset, if set, in watts."),
    F("clocks.current.graphics", "clocks.gr", "MHz", g_clock, NVML_CLOCK_GRAPHICS, "The graphics clock now."),
    F("clocks.current.sm", "clocks.sm", "MHz", g_clock, NVML_CLOCK_SM, "The SM clock now."),
    F("clocks.current.memory", "clocks.mem", "MHz", g_clock, NVML_CLOCK_MEM, "The memory clock now."),
    F("clocks.current.video", "clocks.video", "MHz", g_clock, NVML_CLOCK_VIDEO, "The video engines' clock now."),
    S("clocks.applications", "The clocks applications run at, set with -ac."),
    F("clocks.applications.graphics", "clocks.applications.gr", "MHz", g_app_clock, NVML_CLOCK_GRAPHICS,
      "The applications graphics clock."),
    F("clocks.applications.memory", "clocks.applications.mem", "MHz", g_app_clock, NVML_CLOCK_MEM,
      "The applications memory clock."),
    S("clocks.default_applications", "The applications clocks after a reset (-rac)."),
    F("clocks.default_applications.graphics", "clocks.default_applications.gr", "MHz", g_app_clock,
      NVML_CLOCK_GRAPHICS + APP_DEFAULT, "The default applications graphics clock."),
    F("clocks.default_applications.memory", "clocks.default_applications.mem", "MHz", g_app_clock,
      NVML_CLOCK_MEM + APP_DEFAULT, "The default applications memory clock."),
    S("clocks.max", "The highest clocks the GPU is designed for."),
    F("clocks.max.graphics", "clocks.max.gr", "MHz", g_max_clock, NVML_CLOCK_GRAPHICS, "The highest graphics clock."),
    F("clocks.max.sm", "clocks.max.sm", "MHz", g_max_clock, NVML_CLOCK_SM, "The highest SM clock."),
    F("clocks.max.memory", "clocks.max.mem", "MHz", g_max_clock, NVML_CLOCK_MEM, "The highest memory clock."),
    S("mig.mode", "Whether MIG is on: \"Enabled\" or \"Disabled\"; a change needs a GPU reset."),
    F("mig.mode.current", NULL, NULL, g_mig_mode, 0, "The MIG mode in use."),
    F("mig.mode.pending", NULL, NULL, g_mig_mode, 1, "The MIG mode after a reset."),
    S("gsp.mode", "Whether the GSP firmware runs: \"Enabled\" or \"Disabled\"."),
    F("gsp.mode.current", NULL, NULL, g_gsp_mode, 0, "The GSP firmware mode now."),
    F("gsp.mode.default", NULL, NULL, g_gsp_mode, 1, "The default GSP firmware mode."),
    F("c2c.mode", NULL, NULL, g_c2c, 0, "Whether the chip-to-chip link is on: \"Enabled\" or \"Disabled\"."),
    S("protected_memory", "Memory protected for confidential computing."),
    F("protected_memory.total", NULL, "MiB", g_protected_memory, MEM_TOTAL, "All protected memory."),
    F("protected_memory.used", NULL, "MiB", g_protected_memory, MEM_USED, "Protected memory in use."),
    F("protected_memory.free", NULL, "MiB", g_protected_memory, MEM_FREE, "Protected memory free."),
    F("fabric.state", NULL, NULL, g_fabric, FABRIC_STATE, "Where the GPU's fabric registration stands."),
    F("fabric.status", NULL, NULL, g_fabric, FABRIC_STATUS, "The registration's result, once completed."),
    F("fabric.cliqueId", NULL, NULL, g_fabric, FABRIC_CLIQUE, "The fabric clique of the GPU."),
    F("fabric.clusterUuid", NULL, NULL, g_fabric, FABRIC_CLUSTER, "The UUID of the GPU's cluster."),
    F("fabric.health.summary", NULL, NULL, g_fabric, FABRIC_SUMMARY, "The fabric's health overall."),
    F("fabric.health.bandwidth", NULL, NULL, g_fabric, FABRIC_BANDWIDTH, "Whether the bandwidth is degraded."),
    F("fabric.health.route_recovery_in_progress", NULL, NULL, g_fabric, FABRIC_ROUTE_RECOVERY,
      "Whether a route is being recovered."),
    F("fabric.health.route_unhealthy", NULL, NULL, g_fabric, FABRIC_ROUTE_UNHEALTHY,
      "Whether a route is unhealthy."),
    F("fabric.health.access_timeout_recovery", NULL, NULL, g_fabric, FABRIC_ACCESS_TIMEOUT,
      "Whether an access timeout is being recovered."),
    F("fabric.health.incorrect_configuration", NULL, NULL, g_fabric, FABRIC_INCORRECT_CONFIG,
      "Whether the fabric is configured wrong."),
    F("fabric.health.partition_assigned", NULL, NULL, g_fabric, FABRIC_PARTITION,
      "Whether the GPU is in a fabric partition."),
    S("platform", "Where the GPU sits in its rack."),
    F("platform.chassis_serial_number", NULL, NULL, g_platform, PLAT_CHASSIS, "The chassis's serial number."),
    F("platform.slot_number", NULL, NULL, g_platform, PLAT_SLOT, "The chassis slot (switches included)."),
    F("platform.tray_index", NULL, NULL, g_platform, PLAT_TRAY, "The compute tray (switches not included)."),
    F("platform.host_id", NULL, NULL, g_platform, PLAT_HOST, "The node within the slot."),
    F("platform.peer_type", NULL, NULL, g_platform, PLAT_PEER, "How the GPU reaches its NVLink peers."),
    F("platform.module_id", NULL, NULL, g_platform, PLAT_MODULE, "The GPU's module ID within the node."),
    F("platform.gpu_fabric_guid", NULL, NULL, g_platform, PLAT_GUID, "The GPU's fabric ID."),
    F("hostname", NULL, NULL, g_hostname, 0, "The host name set on the GPU."),
};

const unsigned query_field_count = sizeof query_fields / sizeof query_fields[0];

static int alias_matches(const char *aliases, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = aliases; p != NULL && *p != '\0';) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

const struct field *find_field(const char *name)
{
    for (unsigned i = 0; i < query_field_count; i++) {
        const struct field *f = &query_fields[i];
        if (f->name != NULL && (strcmp(f->name, name) == 0 || alias_matches(f->aliases, name)))
            return f;
    }
    return NULL;
}
