/*
 * The values nvidia-smi prints, each read through one NVML call: shared by --query-gpu
 * (fields.c) and -q / -q -x (qtree.c), so both show the same number. A getter fills a struct
 * val: the value without its unit, or the NVML error the tool prints instead ([N/A], ...).
 * `arg` selects among the values one NVML call gives (a clock type, a counter, ...).
 */
#ifndef DRA_FAKE_SMI_VALUES_H
#define DRA_FAKE_SMI_VALUES_H

#include "smi.h"

/* identity, board, PCI */
getter_fn g_name, g_uuid, g_serial, g_bus_id, g_index, g_minor, g_vbios, g_brand, g_architecture, g_board_id,
    g_multigpu, g_board_part, g_gpu_part, g_pdi, g_module_id, g_platform, g_pci, g_pci_ext, g_pcie_gen,
    g_pcie_width, g_pcie_tput, g_replay, g_atomics, g_field;
/* modes and states */
getter_fn g_enable, g_addressing_mode, g_accounting_buffer, g_driver_model, g_inforom, g_inforom_checksum,
    g_recovery_action, g_gom, g_virtualization, g_gsp_version, g_gsp_mode, g_c2c, g_compute_mode, g_compute_cap,
    g_mig_mode, g_fabric, g_capabilities, g_auto_boost;
/* performance, memory, utilization */
getter_fn g_fan, g_pstate, g_event_mask, g_event_reason, g_event_counter, g_memory, g_bar1, g_protected_memory,
    g_util, g_engine_util, g_encoder_stats, g_fbc_stats;
/* ECC, pages, rows */
getter_fn g_dram_encryption, g_ecc_counter, g_ecc_total, g_sram, g_retired, g_retired_list, g_retired_pending, g_remapped,
    g_histogram, g_repair;
/* temperature, power, clocks */
getter_fn g_temperature, g_temperature_margin, g_memory_temperature, g_threshold, g_threshold_tlimit,
    g_power_draw, g_power_field, g_power_limit, g_module_power, g_clock, g_app_clock, g_max_clock, g_boost_clock;
/* MIG device attributes */
getter_fn g_mig_attr, g_mig_id;
/* without a device */
getter_fn g_timestamp, g_driver_version, g_cuda_version, g_count;
/* fixed answers: N/A (no NVML call for it; no simulated board has it), deprecated */
getter_fn g_na, g_deprecated, g_hostname;

enum { EN_PERSISTENCE, EN_DISPLAY_ACTIVE, EN_DISPLAY_ATTACHED, EN_ACCOUNTING, EN_ECC, EN_ECC_PENDING, EN_POWER };
enum { MEM_TOTAL, MEM_RESERVED, MEM_USED, MEM_FREE };
enum { PCI_DOMAIN, PCI_BUS, PCI_DEVICE, PCI_DEVICE_ID, PCI_SUBSYSTEM_ID };
enum { GEN_CURRENT, GEN_GPU_CURRENT, GEN_MAX, GEN_GPU_MAX, GEN_HOST_MAX };
enum { LIMIT_REQUESTED, LIMIT_ENFORCED, LIMIT_DEFAULT, LIMIT_MIN, LIMIT_MAX };
enum { SRAM_VOL_PARITY, SRAM_VOL_SECDED, SRAM_AGG_PARITY, SRAM_AGG_SECDED, SRAM_THRESHOLD, SRAM_L2, SRAM_SM,
       SRAM_MCU, SRAM_PCIE, SRAM_OTHER };
enum { ROWS_CORR, ROWS_UNC, ROWS_PENDING, ROWS_FAILURE, ROWS_CORR_INACTIVE, ROWS_UNC_INACTIVE };
enum { FABRIC_STATE, FABRIC_STATUS, FABRIC_CLIQUE, FABRIC_CLUSTER, FABRIC_SUMMARY, FABRIC_BANDWIDTH,
       FABRIC_ROUTE_RECOVERY, FABRIC_ROUTE_UNHEALTHY, FABRIC_ACCESS_TIMEOUT, FABRIC_INCORRECT_CONFIG,
       FABRIC_PARTITION };
enum { PLAT_CHASSIS, PLAT_SLOT, PLAT_TRAY, PLAT_HOST, PLAT_PEER, PLAT_MODULE, PLAT_GUID };
enum { ATTR_SM, ATTR_CE, ATTR_ENC, ATTR_DEC, ATTR_OFA, ATTR_JPG };
/* g_ecc_counter: errorType * 100 + counterType * 10 + nvmlMemoryLocation_t */
#define ECC_ARG(type, counter, location) ((type) * 100 + (counter) * 10 + (location))
/* g_app_clock: clock type, + 10 for the default applications clock */
#define APP_DEFAULT 10

/* The formatted forms shared with the summary table. */
nvmlReturn_t memory_mib(nvmlDevice_t dev, unsigned long long mib[4]); /* MEM_* */
const char *enable_text(unsigned on);                                 /* Enabled / Disabled */

#endif
