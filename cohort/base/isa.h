// Compiling one source for several instruction sets.
//
// A kernel source named *_isa.cc is compiled once per ISA that the target
// architecture has fast kernels for (cmake/CohortLayer.cmake; on x86-64:
// avx2 and avx512), each time with COHORT_ISA_AVX2 or COHORT_ISA_AVX512
// defined. COHORT_ISA_NS names that ISA's namespace (isa_avx2, isa_avx512),
// so the copies never collide; COHORT_ISA_BEGIN / COHORT_ISA_END switch the
// compiler's target for everything declared in between:
//
//   #include <vector>            // every system header first, outside
//   #include "cohort/base/isa.h"
//   COHORT_ISA_BEGIN
//   namespace cohort::kernels::COHORT_ISA_NS { ... }
//   COHORT_ISA_END
//
// The baseline code picks one copy at run time through a table of function
// pointers that each copy defines, at namespace scope:
//
//   // foo_isa.cc, in namespace ns::COHORT_ISA_NS:
//   extern const FooTable kFoo;
//   const FooTable kFoo{...};
//   // foo.cc, in namespace ns (includes cohort/base/cpu.h):
//   COHORT_ISA_DECLARE_TABLE(FooTable, kFoo)
//   const FooTable* foo() { return COHORT_ISA_TABLE(FooTable, &kFooBaseline, kFoo); }
//
// COHORT_ISA_TABLE gives the copy of kernel_path(), or the baseline pointer
// (which may be null) on the baseline path and on architectures without
// ISA copies.
// Why pragmas rather than per-file -mavx2: with a command-line flag, inline
// functions from shared headers (std::vector's growth, std::function's
// invoker) would be compiled for the ISA as well, and the linker keeps one
// copy of each for the whole program, possibly the AVX-512 one, which then
// crashes baseline code on an AVX2 CPU. Under a pragma only the functions
// declared inside get the target; templates declared outside keep the
// baseline when instantiated here.
#pragma once

#if defined(COHORT_ISA_AVX512)
#define COHORT_ISA_NS isa_avx512
#define COHORT_ISA_TARGET "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c,bmi,bmi2,lzcnt"
#elif defined(COHORT_ISA_AVX2)
#define COHORT_ISA_NS isa_avx2
#define COHORT_ISA_TARGET "avx2,fma,f16c,bmi,bmi2,lzcnt"
#endif

#if defined(__x86_64__)
#define COHORT_ISA_DECLARE_TABLE(Type, name) \
  namespace isa_avx2 {                       \
  extern const Type name;                    \
  }                                          \
  namespace isa_avx512 {                     \
  extern const Type name;                    \
  }
#define COHORT_ISA_TABLE(Type, baseline, name) \
  ::cohort::kernel_table<Type>(baseline, &isa_avx2::name, &isa_avx512::name)
#else
#define COHORT_ISA_DECLARE_TABLE(Type, name)
#define COHORT_ISA_TABLE(Type, baseline, name) static_cast<const Type*>(baseline)
#endif

#if defined(COHORT_ISA_TARGET) && defined(__clang__)
// clang ignores `#pragma GCC target`; its own pragma gives every function
// that follows the target attribute (the fuzz preset builds with clang).
#define COHORT_ISA_STR_(x) #x
#define COHORT_ISA_PRAGMA_(x) _Pragma(COHORT_ISA_STR_(x))
#define COHORT_ISA_BEGIN \
  COHORT_ISA_PRAGMA_(clang attribute push(__attribute__((target(COHORT_ISA_TARGET))), apply_to = function))
#define COHORT_ISA_END _Pragma("clang attribute pop")
#elif defined(COHORT_ISA_TARGET)
#define COHORT_ISA_STR_(x) #x
#define COHORT_ISA_PRAGMA_(x) _Pragma(COHORT_ISA_STR_(x))
#define COHORT_ISA_BEGIN                                                                         \
  _Pragma("GCC push_options") COHORT_ISA_PRAGMA_(GCC target(COHORT_ISA_TARGET))                  \
      _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
          _Pragma("GCC diagnostic ignored \"-Wpsabi\"")
#define COHORT_ISA_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif
