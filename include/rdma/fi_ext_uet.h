/*
 * fi_ext_uet.h: public extension header of the uet libfabric provider.
 *
 * uet is an Ultra-Ethernet-Transport-like reliable datagram provider over
 * UDP. Applications select it with FI_PROVIDER=uet and
 * FI_PROVIDER_PATH=<dir holding libuet-fi.so>; this header names its
 * parameters and wire constants for programs that want to set or report them.
 */
#ifndef FI_EXT_UET_H
#define FI_EXT_UET_H

#include <rdma/fabric.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FI_UET_PROV_NAME "uet"

/* UDP destination port of the UET fabric (IANA: 4793). Endpoints bind an
 * ephemeral port unless FI_UET_PORT names one. */
#define FI_UET_DEFAULT_PORT 4793

/* DSCP values a switch writes into the IP header of a trimmed packet: cut
 * inside the fabric, or at the last hop (the receiver's downlink). */
#define FI_UET_DSCP_TRIMMED 0x0B
#define FI_UET_DSCP_TRIMMED_LASTHOP 0x0C

/* Parameters (environment variables; `fi_info -e` prints their help). */
#define FI_UET_PARAM_MTU "FI_UET_MTU"
#define FI_UET_PARAM_WINDOW "FI_UET_WINDOW"
#define FI_UET_PARAM_RTO_MIN_US "FI_UET_RTO_MIN_US"
#define FI_UET_PARAM_RTO_MAX_US "FI_UET_RTO_MAX_US"
#define FI_UET_PARAM_MAX_RETRIES "FI_UET_MAX_RETRIES"
#define FI_UET_PARAM_SOCKBUF "FI_UET_SOCKBUF"
#define FI_UET_PARAM_INJECT_SIZE "FI_UET_INJECT_SIZE"
#define FI_UET_PARAM_SPIN_BEFORE_YIELD "FI_UET_SPIN_BEFORE_YIELD"
#define FI_UET_PARAM_SRC_ADDR "FI_UET_SRC_ADDR"
#define FI_UET_PARAM_PORT "FI_UET_PORT"

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_UET_H */
