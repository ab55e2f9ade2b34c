# nvidia-smi (native/smi): one static program on the NVML library's static archive, so that it
# runs in images without a C library. Included by native/Makefile (BUILD, CC, CFLAGS and the library's
# NVML_CFLAGS); links the
# library's static archive $(BUILD)/libdranvml.a, its header is nvml/nvml.h.
NVML_ARCHIVE ?= $(BUILD)/libdranvml.a
SMI_SRC := $(wildcard smi/*.c)
SMI_OBJ := $(patsubst smi/%.c,$(BUILD)/smi/%.o,$(SMI_SRC))
SMI_HDR := $(wildcard smi/*.h) nvml/nvml.h

$(BUILD)/nvidia-smi: $(SMI_OBJ) $(NVML_ARCHIVE)
	$(CC) $(CFLAGS) -static -o $@ $(SMI_OBJ) $(NVML_ARCHIVE)

$(BUILD)/smi/%.o: smi/%.c $(SMI_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(NVML_CFLAGS) -Invml -Ismi -c $< -o $@
