/*
 * order.h - the order a sweep's configs are measured in: most promising first by a
 * cost model, interleaved over BLOCK_SIZE_M so that any prefix is a fair sample.
 *
 * The cost model is a roofline estimate of one fused-MoE layer (both GEMMs): padded
 * tensor-core work at a tile-shape efficiency against weight and activation traffic
 * (weight re-reads per M block, softened by GROUP_SIZE_M), with wave quantisation, a
 * pipeline-depth and accumulator-pressure factor, and, on a full machine, the warp tile
 * and the warps that shared memory lets reside per SM. It ranks; it never times: the
 * measurements decide. A config's score is its best showing at any batch size: the lowest,
 * over the batch sizes, of its estimate over the best estimate there (1 = predicted best
 * at one batch size at least), so each batch size's predicted winners come first.
 */
#ifndef COORD_ORDER_H
#define COORD_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "space.h"

/* The model's estimate of one layer at batch size m, microseconds; for ranking only. */
double ord_cost_us(const krn_shape_t *shape, const krn_config_t *cfg, uint32_t m);

/* The model's mean cost of one config of v[0, n) over all of bs[0, nb): the sum of its
 * estimates, averaged over the configs (at most 512 of them, spread over v).
 * Relative only: what one shape's config costs against another shape's. 0 when n is 0. */
double ord_shape_cost_us(const krn_shape_t *shape, const uint32_t *bs, size_t nb, const krn_config_t *v, size_t n);

/* Reorders v[0, n) for a shape measured at bs[0, nb): configs are taken in rounds, one
 * per BLOCK_SIZE_M value per round (values in ascending order), each the best-scored
 * remaining config of its BLOCK_SIZE_M. So every prefix of k rounds holds the k most
 * promising configs of every BLOCK_SIZE_M, and the first (distinct BLOCK_SIZE_M) configs
 * span them all. Deterministic (ties keep the space order). MT_NOMEM on failure, v unchanged. */
mt_status_t ord_configs(const krn_shape_t *shape, const uint32_t *bs, size_t nb, krn_config_t *v, size_t n);

#endif
