/* Declarations of the FreeRTOS kernel API that the generated glue uses, written from the kernel's
 * documented API for a compile check: the kernel's own headers are not available from the package
 * registries this project's CI reaches. Types as in a 32-bit port. */
#ifndef FREERTOS_STUB_H
#define FREERTOS_STUB_H

#include <stdint.h>

typedef long BaseType_t;
typedef unsigned long UBaseType_t;
typedef uint32_t TickType_t;
typedef uint16_t configSTACK_DEPTH_TYPE;

#define pdTRUE ((BaseType_t)1)
#define pdFALSE ((BaseType_t)0)
#define pdPASS pdTRUE
#define portMAX_DELAY ((TickType_t)0xffffffffUL)
#define tskIDLE_PRIORITY ((UBaseType_t)0U)

#endif
