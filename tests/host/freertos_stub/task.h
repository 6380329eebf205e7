/* The task API subset the generated glue uses (see FreeRTOS.h in this folder). */
#ifndef TASK_STUB_H
#define TASK_STUB_H

#include "FreeRTOS.h"

typedef struct tskTaskControlBlock *TaskHandle_t;
typedef void (*TaskFunction_t)(void *);

BaseType_t xTaskCreate(TaskFunction_t code, const char *name, configSTACK_DEPTH_TYPE stack_depth, void *parameters,
                       UBaseType_t priority, TaskHandle_t *created);
TaskHandle_t xTaskGetCurrentTaskHandle(void);
uint32_t ulTaskNotifyTake(BaseType_t clear_on_exit, TickType_t ticks_to_wait);
BaseType_t xTaskNotifyGive(TaskHandle_t task);

#endif
