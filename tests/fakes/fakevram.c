/* An LD_PRELOAD shim that makes a Vulkan device report the memory a test asks for.
 *
 * Mesa's lavapipe (a CPU-backed Vulkan device) reports one fixed 2 GiB heap and no memory budget, and nothing in
 * Mesa or ggml changes that. The tests need a device with a chosen size and free memory to exercise full and
 * partial offload, so this shim rewrites what the driver reports; allocations still go where they always go.
 *
 *   FAKE_VK_VRAM_MIB   size of each device-local heap (default: unchanged)
 *   FAKE_VK_FREE_MIB   free memory, through a faked VK_EXT_memory_budget (default: the size)
 *   FAKE_VK_DISCRETE   1: the device says it is a discrete GPU (ggml then lists it without GGML_VK_VISIBLE_DEVICES)
 *
 * ggml resolves every instance-level Vulkan function through vkGetInstanceProcAddr (Vulkan-Hpp's dynamic
 * dispatcher), so interposing that one symbol is enough: it hands out the wrappers below and forwards the rest.
 * The wrapped functions must not be exported under their own names (the loader's trampolines would bind to them
 * and recurse).
 *
 * Build: cc -shared -fPIC -O2 -o fakevram.so fakevram.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

static PFN_vkGetInstanceProcAddr real_gipa;
static PFN_vkGetPhysicalDeviceMemoryProperties real_mem;
static PFN_vkGetPhysicalDeviceMemoryProperties2 real_mem2;
static PFN_vkGetPhysicalDeviceProperties real_props;
static PFN_vkGetPhysicalDeviceProperties2 real_props2;
static PFN_vkEnumerateDeviceExtensionProperties real_exts;

static long env_mib(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? atol(v) : -1;
}

static void rewrite_heaps(VkPhysicalDeviceMemoryProperties *p) {
    long vram = env_mib("FAKE_VK_VRAM_MIB");
    if (vram < 0) return;
    for (uint32_t i = 0; i < p->memoryHeapCount; i++)
        if (p->memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            p->memoryHeaps[i].size = (VkDeviceSize)vram << 20;
}

static void fill_budget(const VkPhysicalDeviceMemoryProperties *p, void *chain) {
    for (VkBaseOutStructure *s = chain; s; s = s->pNext) {
        if (s->sType != VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT) continue;
        VkPhysicalDeviceMemoryBudgetPropertiesEXT *b = (VkPhysicalDeviceMemoryBudgetPropertiesEXT *)s;
        long free_mib = env_mib("FAKE_VK_FREE_MIB");
        for (uint32_t i = 0; i < p->memoryHeapCount; i++) {
            VkDeviceSize size = p->memoryHeaps[i].size;
            VkDeviceSize free_bytes = free_mib >= 0 ? (VkDeviceSize)free_mib << 20 : size;
            b->heapBudget[i] = size;
            b->heapUsage[i] = free_bytes < size ? size - free_bytes : 0;
        }
    }
}

static VKAPI_ATTR void VKAPI_CALL fake_mem(VkPhysicalDevice dev, VkPhysicalDeviceMemoryProperties *p) {
    real_mem(dev, p);
    rewrite_heaps(p);
}

static VKAPI_ATTR void VKAPI_CALL fake_mem2(VkPhysicalDevice dev, VkPhysicalDeviceMemoryProperties2 *p) {
    /* the driver does not know the budget struct: hide it from the driver, fill it ourselves */
    VkBaseOutStructure *prev = (VkBaseOutStructure *)p, *budget = NULL;
    for (VkBaseOutStructure *s = p->pNext; s; prev = s, s = s->pNext) {
        if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT) {
            budget = s;
            prev->pNext = s->pNext;
            break;
        }
    }
    real_mem2(dev, p);
    rewrite_heaps(&p->memoryProperties);
    if (budget) {
        budget->pNext = p->pNext;
        p->pNext = budget;
        fill_budget(&p->memoryProperties, budget);
    }
}

static void make_discrete(VkPhysicalDeviceProperties *p) {
    if (env_mib("FAKE_VK_DISCRETE") == 1) p->deviceType = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
}

static VKAPI_ATTR void VKAPI_CALL fake_props(VkPhysicalDevice dev, VkPhysicalDeviceProperties *p) {
    real_props(dev, p);
    make_discrete(p);
}

static VKAPI_ATTR void VKAPI_CALL fake_props2(VkPhysicalDevice dev, VkPhysicalDeviceProperties2 *p) {
    real_props2(dev, p);
    make_discrete(&p->properties);
}

static VKAPI_ATTR VkResult VKAPI_CALL fake_exts(VkPhysicalDevice dev, const char *layer, uint32_t *count,
                                                VkExtensionProperties *props) {
    uint32_t real_count = 0;
    VkResult r = real_exts(dev, layer, &real_count, NULL);
    if (r != VK_SUCCESS || layer) return real_exts(dev, layer, count, props);
    VkExtensionProperties *all = calloc(real_count + 1, sizeof *all);
    if (!all) return VK_ERROR_OUT_OF_HOST_MEMORY;
    r = real_exts(dev, layer, &real_count, all);
    int have = 0;
    for (uint32_t i = 0; i < real_count; i++)
        if (!strcmp(all[i].extensionName, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME)) have = 1;
    if (!have) {
        strcpy(all[real_count].extensionName, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
        all[real_count].specVersion = 1;
        real_count++;
    }
    if (!props) {
        *count = real_count;
    } else {
        uint32_t n = *count < real_count ? *count : real_count;
        memcpy(props, all, n * sizeof *all);
        r = n < real_count ? VK_INCOMPLETE : VK_SUCCESS;
        *count = n;
    }
    free(all);
    return r;
}

#define WRAP(name, real, fake)                                      \
    if (!strcmp(pName, name) || !strcmp(pName, name "KHR")) {       \
        PFN_vkVoidFunction f = real_gipa(instance, pName);          \
        if (!f) return NULL;                                        \
        real = (__typeof__(real))f;                                 \
        return (PFN_vkVoidFunction)fake;                            \
    }

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetInstanceProcAddr(VkInstance instance, const char *pName) {
    if (!real_gipa) real_gipa = (PFN_vkGetInstanceProcAddr)dlsym(RTLD_NEXT, "vkGetInstanceProcAddr");
    if (!real_gipa || !pName) return NULL;
    if (instance) {
        WRAP("vkGetPhysicalDeviceMemoryProperties2", real_mem2, fake_mem2)
        WRAP("vkGetPhysicalDeviceProperties2", real_props2, fake_props2)
        if (!strcmp(pName, "vkGetPhysicalDeviceMemoryProperties")) {
            real_mem = (PFN_vkGetPhysicalDeviceMemoryProperties)real_gipa(instance, pName);
            return real_mem ? (PFN_vkVoidFunction)fake_mem : NULL;
        }
        if (!strcmp(pName, "vkGetPhysicalDeviceProperties")) {
            real_props = (PFN_vkGetPhysicalDeviceProperties)real_gipa(instance, pName);
            return real_props ? (PFN_vkVoidFunction)fake_props : NULL;
        }
        if (!strcmp(pName, "vkEnumerateDeviceExtensionProperties")) {
            real_exts = (PFN_vkEnumerateDeviceExtensionProperties)real_gipa(instance, pName);
            return real_exts ? (PFN_vkVoidFunction)fake_exts : NULL;
        }
    }
    return real_gipa(instance, pName);
}
